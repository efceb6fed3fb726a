package docs

import (
	"context"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// githubByHand is GitHub's REST limits written out (docs/meters.md).
func githubByHand(ctx context.Context) error {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)), // the token, hashed
		ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour, Margin: time.Second}),
		ratemonitor.WithMeter(ratemonitor.Meter{
			Name:  "points", // counted under "points:" + the token's key
			Rules: []strategy.Rule{{Limit: 900, Window: time.Minute, Margin: time.Second}},
			Cost: func(req *http.Request) int {
				if req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions {
					return 1
				}
				return 5
			},
		}),
		ratemonitor.WithMeter(ratemonitor.Meter{
			Name: "content", // writes: 80 a minute, 500 an hour; reads are not charged
			Rules: []strategy.Rule{{Limit: 80, Window: time.Minute, Margin: time.Second},
				{Limit: 500, Window: time.Hour, Margin: time.Second}},
			Cost: func(req *http.Request) int {
				if req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions {
					return 0
				}
				return 1
			},
		}),
		ratemonitor.WithInFlight(100),
		ratemonitor.WithPacing())
	if err != nil {
		return err
	}
	defer tr.Close()
	st, err := tr.Status(ctx, "hmac:…") // st.Rules: the hour; st.Meters: points, then content
	_ = st
	return err
}

// xeroThreeMeters is one client paced on three meters (docs/meters.md).
func xeroThreeMeters(ctx context.Context) error {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithRules( // the tenant: 60 a minute, 5000 a day
			strategy.Rule{Limit: 60, Window: time.Minute},
			strategy.Rule{Limit: 5000, Window: 24 * time.Hour}),
		ratemonitor.WithAppRules("xero-app:my-client-id", // the app: 10 000 a minute, every tenant
			strategy.Rule{Limit: 10_000, Window: time.Minute}),
		ratemonitor.WithInFlight(5), // the tenant: 5 calls in progress
		ratemonitor.WithPacing())
	if err != nil {
		return err
	}
	defer tr.Close()
	tenant, err := tr.AllocationUsed(ctx, "tenant-1") // the tenant's minute and day
	if err != nil {
		return err
	}
	app, err := tr.Meter("app").AllocationUsed(ctx, "tenant-1") // the app's minute
	if err != nil {
		return err
	}
	wait, err := tr.Meter("app").WaitSeconds(ctx, "tenant-1", 1) // seconds until the app has room
	_, _, _ = tenant, app, wait
	return err
}

package docs

import (
	"context"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/retry"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func syncAndRetry(ctx context.Context) error {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(
			strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second},
			strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}),
		ratemonitor.WithAppRules("xero-app", strategy.Rule{Limit: 10_000, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}), // Xero's and the IETF headers by default
		ratemonitor.WithPacing())
	if err != nil {
		return err
	}
	defer tr.Close()
	client := retry.NewClient(tr).StandardClient() // an *http.Client; or use the retryablehttp.Client
	// … client.Do(req) as usual; then:
	st, err := tr.Status(ctx, "tenant-id") // st.Rules[i].Used, .Remaining, .Reported; st.PausedUntil; st.Meters
	if err != nil {
		return err
	}
	_, _ = client, st
	return nil
}

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
		ratemonitor.WithInFlight(100),
		ratemonitor.WithPacing())
	if err != nil {
		return err
	}
	defer tr.Close()
	st, err := tr.Status(ctx, "hmac:…") // st.Rules: the hour; st.App: the points meter
	_ = st
	return err
}

package docs

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// learningClient is docs/learning.md's Transport made without rules.
func learningClient(ctx context.Context) error {
	changes := observe.Func(func(e observe.Event) {
		if e.Kind == observe.LimitChanged {
			log.Printf("limit %s on %q: %v", e.Op, e.Key, e.Rules) // Op "learned" or "set"
		}
	})
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithPacing(), // no WithRules: each key's limits come from its answers
		ratemonitor.WithObserver(changes))
	if err != nil {
		return err
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	// … client.Do(req) as usual; then what a key learned:
	st, err := tr.Status(ctx, "api.example.com") // st.Meters: one per policy, such as "ietf:burst"
	if err != nil {
		return err
	}
	_, _ = client, st
	return nil
}

// learningSetMeter is docs/learning.md's limit set at run time.
func learningSetMeter(tr *ratemonitor.Transport) error {
	// For every key, from now on; replaces the meter "ietf:burst" the answers taught.
	return tr.SetMeter(ratemonitor.Meter{Name: "ietf:burst",
		Rules: []strategy.Rule{{Limit: 5, Window: time.Second}}})
}

// learningGitHub is docs/learning.md's X-RateLimit-* upstream whose window is known.
func learningGitHub() (*ratemonitor.Transport, error) {
	return ratemonitor.New(http.DefaultTransport, ratemonitor.WithPacing(),
		ratemonitor.WithSync(ratemonitor.SyncConfig{
			XRateLimitWindow: time.Hour, // the fields do not say it
			XRateLimitReset:  headers.ResetEpoch}))
}

// learningFromReport is docs/learning.md's meter whose limit a cost report gives.
func learningFromReport(reader cost.Reader) (*ratemonitor.Transport, error) {
	// "points": 5 a request before the send; its limit and each request's real cost from reader
	return ratemonitor.New(http.DefaultTransport, ratemonitor.WithPacing(),
		ratemonitor.WithMeter(ratemonitor.Meter{Name: "points", Cost: func(*http.Request) int { return 5 }}),
		ratemonitor.WithCostReport(reader))
}

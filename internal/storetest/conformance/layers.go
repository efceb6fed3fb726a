package conformance

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// stacked is two Transports on one key over one store, the outer wrapping the inner, each with
// the rules 60/1m and 5000/24h (the PHP package's layering): one request must count once in
// each counter, in monitoring mode and paced.
func stacked(t *testing.T, tg Target) {
	rep := newReport(t, tg)
	defer rep.done()
	rules := []strategy.Rule{{Limit: 60, Window: time.Minute}, {Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}}
	up := newUpstream(t)
	hc := &http.Transport{}
	t.Cleanup(hc.CloseIdleConnections)
	for _, paced := range []bool{false, true} {
		st := tg.Open(t, nil)
		key := newKey("stacked")
		opts := []ratemonitor.Option{ratemonitor.WithStore(st), ratemonitor.WithRules(rules...),
			ratemonitor.WithKeyFunc(func(*http.Request) string { return key }), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing),
			ratemonitor.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
		if paced {
			opts = append(opts, ratemonitor.WithPacing())
		}
		inner, err := ratemonitor.New(hc, opts...)
		if err != nil {
			t.Fatalf("inner Transport: %v", err)
		}
		outer, err := ratemonitor.New(inner, opts...)
		if err != nil {
			t.Fatalf("outer Transport: %v", err)
		}
		req, _ := http.NewRequestWithContext(ctx(t), http.MethodGet, up.srv.URL, nil)
		resp, err := outer.RoundTrip(req)
		if err != nil {
			t.Fatalf("request through stacked Transports: %v", err)
		}
		resp.Body.Close()
		used, err := outer.AllocationUsed(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range used {
			if u.Used != 1 {
				rep.fail("stacked Transports (paced %v): one request counts %d in rule %s, want 1", paced, u.Used, rules[i])
			}
		}
	}
}

// splitCount is two Transports sharing one store and key whose rules have the same window and limit
// but different granularities (then margins): together they must never admit more than one of
// them allows, or New must refuse the second, saying why.
func splitCount(t *testing.T, tg Target) {
	rep := newReport(t, tg)
	defer rep.done()
	pairs := [][2]strategy.Rule{
		{{Limit: 20, Window: time.Second, Granularity: 10 * time.Millisecond}, {Limit: 20, Window: time.Second, Granularity: 50 * time.Millisecond}},
		{{Limit: 20, Window: time.Second, Granularity: 50 * time.Millisecond, Margin: 50 * time.Millisecond}, {Limit: 20, Window: time.Second, Granularity: 50 * time.Millisecond, Margin: 100 * time.Millisecond}},
	}
	for _, pair := range pairs {
		rec := &recorder{Store: tg.Open(t, nil)}
		key := newKey("split")
		up := newUpstream(t)
		hc := &http.Transport{MaxIdleConnsPerHost: goroutines}
		t.Cleanup(hc.CloseIdleConnections)
		var trs []*ratemonitor.Transport
		for _, r := range pair {
			tr, err := ratemonitor.New(hc, ratemonitor.WithStore(rec), ratemonitor.WithRules(r), ratemonitor.WithPacing(),
				ratemonitor.WithKeyFunc(func(*http.Request) string { return key }), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing),
				ratemonitor.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Logf("%s and %s on one key: New refuses the second: %v", pair[0], pair[1], err)
				break
			}
			trs = append(trs, tr)
		}
		if len(trs) < 2 {
			continue
		}
		runCtx, cancel := context.WithTimeout(context.Background(), dur(1200*time.Millisecond))
		var wg sync.WaitGroup
		for i := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Transport: trs[i%2]}
				for runCtx.Err() == nil {
					req, _ := http.NewRequestWithContext(runCtx, http.MethodGet, up.srv.URL, nil)
					resp, err := client.Do(req)
					if err != nil {
						return
					}
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		cancel()
		grants, _, _ := rec.kept()
		strict := storetest.Strategy(t, strategy.Rule{Limit: 20, Window: time.Second})
		v := rep.violations("two Transports with "+pair[0].String()+" and "+pair[1].String()+" on one key", strict, grants, 0)
		t.Logf("%s %s + %s: %d grants in %v, %d violations of 20/1s", tg.Name, pair[0], pair[1], len(grants), dur(1200*time.Millisecond), v)
	}
}

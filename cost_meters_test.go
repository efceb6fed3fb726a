package ratemonitor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// meterReader reads X-Meter (a meter's name), X-Meter-Cost, X-Meter-Remaining and
// X-Meter-Reset (seconds) into a report about that meter (cost.Report.Meters).
var meterReader = cost.ReaderFunc(func(resp *http.Response, _ time.Time) cost.Report {
	rep := cost.Report{Cost: cost.Unknown}
	name := resp.Header.Get("X-Meter")
	if name == "" {
		return rep
	}
	m := cost.Report{Cost: cost.Unknown}
	if n, err := strconv.Atoi(resp.Header.Get("X-Meter-Cost")); err == nil {
		m.Cost = n
	}
	if r, err := strconv.Atoi(resp.Header.Get("X-Meter-Remaining")); err == nil {
		sig := headers.Signal{Window: time.Minute, Remaining: r, Limit: headers.Unknown, Reset: headers.Unknown}
		if s, err := strconv.Atoi(resp.Header.Get("X-Meter-Reset")); err == nil {
			sig.Reset = time.Duration(s) * time.Second
		}
		m.Signals = []headers.Signal{sig}
	}
	rep.Meters = map[string]cost.Report{name: m}
	return rep
})

// TestMeterCostCorrected: a cost.Report's Meters correct the request's charge on each named
// meter, as Cost corrects its own: under pacing a charge of 100 tokens becomes 30 (70 given
// back) or 250 (150 recorded on top); in monitoring mode the 30 gives nothing back. A meter
// that did not charge the request (Cost 0) is charged what the answer says; a name no meter has
// is ignored; a cost above the meter's limit is not believed (an error, the charge stands).
// The request's own count is left as it was.
func TestMeterCostCorrected(t *testing.T) {
	for _, c := range []struct {
		name          string
		paced         bool
		meter, answer string // the meter the answer names, and the cost it says
		wantTokens    int
		wantExtra     int
		wantErr       bool
	}{
		{"paced, lower", true, "tokens", "30", 30, 0, false},
		{"paced, higher", true, "tokens", "250", 250, 0, false},
		{"monitoring, lower", false, "tokens", "30", 100, 0, false},
		{"monitoring, higher", false, "tokens", "250", 250, 0, false},
		{"a meter that did not charge", true, "extra", "40", 100, 40, false},
		{"no such meter", true, "nope", "40", 100, 0, false},
		{"above the limit", true, "tokens", "5000", 100, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Meter", c.meter)
				w.Header().Set("X-Meter-Cost", c.answer)
			}))
			defer up.Close()
			var mu sync.Mutex
			var errs []error
			opts := []ratemonitor.Option{ratemonitor.WithClock(clock.NewManual(time.Unix(1_800_000_000, 0))),
				ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
				ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
				ratemonitor.WithMeter(ratemonitor.Meter{Name: "tokens", Rules: []strategy.Rule{{Limit: 1000, Window: time.Minute}},
					Cost: func(*http.Request) int { return 100 }}),
				ratemonitor.WithMeter(ratemonitor.Meter{Name: "extra", Rules: []strategy.Rule{{Limit: 1000, Window: time.Minute}},
					Cost: func(*http.Request) int { return 0 }}),
				ratemonitor.WithCostReport(meterReader),
				ratemonitor.WithErrorHandler(func(_ *http.Request, _ string, err error) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				})}
			if c.paced {
				opts = append(opts, ratemonitor.WithPacing())
			}
			tr, err := ratemonitor.New(up.Client().Transport, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			ctx := context.Background()
			for meter, want := range map[string]int{"tokens": c.wantTokens, "extra": c.wantExtra} {
				u, err := tr.Meter(meter).AllocationUsed(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if u[0].Used != want {
					t.Errorf("meter %q holds %d, want %d", meter, u[0].Used, want)
				}
			}
			if u := used(t, tr, "k"); u != 1 {
				t.Errorf("the request's own count: %d, want 1", u)
			}
			mu.Lock()
			defer mu.Unlock()
			if c.wantErr != (len(errs) == 1) || len(errs) > 1 {
				t.Fatalf("errors %v; want one: %v", errs, c.wantErr)
			}
			if c.wantErr && !strings.Contains(errs[0].Error(), `cost 5000 on meter "tokens"`) {
				t.Errorf("error %q does not name the cost and the meter", errs[0])
			}
		})
	}
}

// TestMeterSignalsKept: with WithSync, a meter's figures update that meter's key, not the
// request's: a remaining of 100 of 1000 raises the meter's usage to 900; on another key, a
// remaining of 0 with a reset of 10 s pauses the meter's key for 10 s, and not the request's.
func TestMeterSignalsKept(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Meter", "tokens")
		w.Header().Set("X-Meter-Remaining", r.Header.Get("X-Remaining"))
		w.Header().Set("X-Meter-Reset", r.Header.Get("X-Reset"))
	}))
	defer up.Close()
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(up.Client().Transport, ratemonitor.WithClock(clk),
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("X-Key", nil)),
		ratemonitor.WithMeter(ratemonitor.Meter{Name: "tokens", Rules: []strategy.Rule{{Limit: 1000, Window: time.Minute}},
			Cost: func(*http.Request) int { return 100 }}),
		ratemonitor.WithCostReport(meterReader), ratemonitor.WithSync(ratemonitor.SyncConfig{}), ratemonitor.WithPacing())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	send := func(key, remaining, reset string) {
		req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
		req.Header.Set("X-Key", key)
		req.Header.Set("X-Remaining", remaining)
		req.Header.Set("X-Reset", reset)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	ctx := context.Background()
	send("k", "100", "")
	if u, _ := tr.Meter("tokens").AllocationUsed(ctx, "k"); u[0].Used != 900 {
		t.Errorf("tokens after a remaining of 100: %d, want 900", u[0].Used)
	}
	send("k2", "0", "10")
	st, err := tr.Status(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(10 * time.Second); !st.Meters[0].PausedUntil.Equal(want) || !st.PausedUntil.IsZero() {
		t.Errorf("after a remaining of 0, reset 10 s: the meter's key paused until %v, the request's until %v; want %v and none",
			st.Meters[0].PausedUntil, st.PausedUntil, want)
	}
	if u, _ := tr.AllocationUsed(ctx, "k2"); u[0].Used != 1 {
		t.Errorf("the request's own count: %d, want 1", u[0].Used)
	}
}

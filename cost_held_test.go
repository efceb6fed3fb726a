package ratemonitor_test

// Adversarial review of issue 15, item 2: attacks on the cost correction that the code
// withstood (main at 6db666f). Kept as regression tests.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/transportcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// used is internal/transportcheck's, under the name these tests use.
var used = transportcheck.Used

// TestCostStackedCountedOnce: two Transports stacked on one store, both with WithCost and
// WithCostReport: the request is charged once (5) and corrected once (to 2).
func TestCostStackedCountedOnce(t *testing.T) {
	if u, _ := stackedCostUsed(t, "2", 5, 10); u != 2 {
		t.Errorf("stacked: used %d, want 2", u)
	}
}

// TestCostMonitoringAndPause: in monitoring mode a higher real cost is recorded on top
// and a lower one kept; a give-back under pacing after the key was paused (a 429 of another
// request) leaves the pause in place.
func TestCostMonitoringAndPause(t *testing.T) {
	var hits atomic.Int64
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	up7 := upstreamtest.Cost(t, "7", &hits)
	mon, err := ratemonitor.New(up7.Client().Transport, ratemonitor.WithClock(clk),
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		ratemonitor.WithCost(func(*http.Request) int { return 3 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost))
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	upstreamtest.SendWithin(mon, up7.URL, time.Second)
	upstreamtest.SendWithin(mon, up7.URL, time.Second) // 14: over the limit, recorded in monitoring mode
	if u := used(t, mon, "k"); u != 14 {
		t.Errorf("monitoring: used %d, want 14", u)
	}

	var n atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Real-Cost", "1")
		if n.Add(1) == 1 {
			// the first answer waits until the second request has been refused
			time.Sleep(100 * time.Millisecond)
			return
		}
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer up.Close()
	paced, err := ratemonitor.New(up.Client().Transport, ratemonitor.WithClock(clk), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}),
		ratemonitor.WithCost(func(*http.Request) int { return 4 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost))
	if err != nil {
		t.Fatal(err)
	}
	defer paced.Close()
	done := make(chan error)
	go func() { done <- upstreamtest.SendWithin(paced, up.URL, time.Second) }()
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	upstreamtest.SendWithin(paced, up.URL, time.Second) // the 429: pauses k for 30 s
	<-done                                              // then the first request's 4 is corrected to 1
	w, err := paced.WaitTime(context.Background(), "k", 1)
	if err != nil || w < 29*time.Second {
		t.Errorf("after a give-back on a paused key: wait %v (%v), want the pause's 30 s", w, err)
	}
}

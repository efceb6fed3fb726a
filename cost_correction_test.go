package ratemonitor_test

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

// sendLimit bounds, in real time, a request to a local upstream that answers at once: it takes
// milliseconds; the bound only ends a test that would otherwise hang, and is generous so that a
// loaded machine does not fail it.
const sendLimit = 30 * time.Second

// TestCostMonitoringKeepsTheChargeAndAGiveBackKeepsThePause: in monitoring mode a higher real
// cost is recorded on top of the charge, even over the limit; a give-back under pacing after the
// key was paused (a 429 of another request, answered while the first waits for its answer)
// leaves the pause in place.
func TestCostMonitoringKeepsTheChargeAndAGiveBackKeepsThePause(t *testing.T) {
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
	upstreamtest.SendWithin(mon, up7.URL, sendLimit)
	upstreamtest.SendWithin(mon, up7.URL, sendLimit) // 14: over the limit, recorded in monitoring mode
	if u := used(t, mon, "k"); u != 14 {
		t.Errorf("monitoring: used %d, want 14", u)
	}

	var n atomic.Int64
	refused := make(chan struct{}) // closed once the second request's 429 has paused k
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Real-Cost", "1")
		if n.Add(1) == 1 {
			<-refused // the first answer waits until the second request has been refused
			return
		}
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer up.Close()
	paced, err := ratemonitor.New(up.Client().Transport, ratemonitor.WithClock(clk), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		// No first-answer gate: the second request must go while the first waits for its answer.
		ratemonitor.WithSync(ratemonitor.SyncConfig{FirstAnswer: -1}),
		ratemonitor.WithCost(func(*http.Request) int { return 4 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost))
	if err != nil {
		t.Fatal(err)
	}
	defer paced.Close()
	done := make(chan error)
	go func() { done <- upstreamtest.SendWithin(paced, up.URL, sendLimit) }()
	for n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	upstreamtest.SendWithin(paced, up.URL, sendLimit) // the 429: pauses k for 30 s
	close(refused)
	<-done // then the first request's 4 is corrected to 1
	w, err := paced.WaitTime(context.Background(), "k", 1)
	if err != nil || w != 30*time.Second {
		t.Errorf("after a give-back on a paused key: wait %v (%v), want the pause's 30 s", w, err)
	}
}

// TestReservationSlotCostCorrectedUp: a request sent on a Reservation's slot (one slot charged)
// that the upstream says cost 10 leaves 10 used: the rest is recorded on top.
func TestReservationSlotCostCorrectedUp(t *testing.T) {
	var hits atomic.Int64
	up := upstreamtest.Cost(t, "10", &hits)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(up.Client().Transport, ratemonitor.WithClock(clk), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		ratemonitor.WithCost(func(*http.Request) int { return 10 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	r, err := tr.Reserve(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, up.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u := used(t, tr, "k"); u != 10 {
		t.Errorf("used %d after a request the upstream says cost 10, want 10", u)
	}
}

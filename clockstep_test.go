package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestPacedWaitAcrossAClockStepIsWhatWaitTimeSaid: issue 13, defect 4. A paced Transport over a
// memory store whose clock is stepped back 1 h: the request after the step waits what WaitTime
// said, a minute, not the hour until the clock catches up with the key (3 660 s before the fix,
// while WaitTime said 60 s). Sleeps are simulated (clock.Manual with Auto), so the figures are
// exact.
func TestPacedWaitAcrossAClockStepIsWhatWaitTimeSaid(t *testing.T) {
	base := clock.NewManual(time.Unix(1_800_000_000, 0))
	base.Auto = true
	clk := &storetest.SteppedClock{Base: base}
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	sent := 0
	up := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	tr, err := New(up, WithStore(mem), WithPacing(), WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		WithKeyFunc(func(*http.Request) string { return "k" }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	get := func() {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://upstream.invalid/", nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	for range 10 {
		get()
	}
	if got := base.Now().Sub(time.Unix(1_800_000_000, 0)); got != 0 {
		t.Fatalf("the first 10 waited %v, want 0", got)
	}
	clk.Step(-time.Hour)
	told, err := tr.WaitTime(ctx, "k", 1)
	if err != nil || told != time.Minute {
		t.Fatalf("WaitTime after the step = %v, %v; want 1m", told, err)
	}
	start := base.Now()
	get()
	if got := base.Now().Sub(start); got != told {
		t.Errorf("the paced request waited %v after the step; WaitTime said %v", got, told)
	}
	if sent != 11 {
		t.Errorf("sent %d, want 11", sent)
	}
	// A step forward by a day: the state has expired, the whole limit goes at once.
	clk.Step(24 * time.Hour)
	start = base.Now()
	for range 10 {
		get()
	}
	if got := base.Now().Sub(start); got != 0 || sent != 21 {
		t.Errorf("a day later: 10 requests waited %v (sent %d), want 0 (21)", got, sent)
	}
}

// TestReservationAcrossAStepBackCountsItsRequests: a Transport
// on a stepped wall clock (the SQLite store's default wall clock is Clocked, so its Transport
// runs on it; a memory store with the same clock here). 10 reserved at T (10/min); the clock
// is stepped back 1 h and the key rebased (its 10 records now stop counting at T − 1 h + 60 s,
// on time in true terms); 61 s later the reserved records count no more, but the Reservation's
// end (T + 60 s on the Transport's clock) is still an hour away. Before the fix 10 requests
// spent its slots uncounted (used 0 after them) and 10 more could be granted at once: 20 in
// 61 s against 10/min. Now the reservation is stale once its Transport's clock reads before its
// start: the requests are counted as usual, and Cancel gives nothing back.
func TestReservationAcrossAStepBackCountsItsRequests(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	sent := 0
	base := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	tr := newTransport(t, base, WithStore(mem), WithPacing(), WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		WithKeyFunc(func(*http.Request) string { return "k" }))
	ctx := context.Background()
	r, err := tr.Reserve(ctx, "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(-time.Hour)
	if _, err := tr.AllocationUsed(ctx, "k"); err != nil { // rebases the key
		t.Fatal(err)
	}
	clk.Advance(61 * time.Second)
	for range 10 {
		req, _ := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, "http://upstream.invalid/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if u := usedOf(t, tr, "k"); u[0] != 10 || r.Remaining() != 10 {
		t.Errorf("10 sent 61 s after the reservation, its slots no longer counting: used %d, want 10 (sent %d, remaining %d)", u[0], sent, r.Remaining())
	}
	if err := r.Cancel(ctx); err != nil || r.Remaining() != 0 {
		t.Errorf("Cancel of the stale reservation: %v, remaining %d; want nil, 0", err, r.Remaining())
	}
	if u := usedOf(t, tr, "k"); u[0] != 10 {
		t.Errorf("after Cancel: used %d, want 10 (nothing taken back)", u[0])
	}
}

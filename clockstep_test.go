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

// TestPacedAcrossClockStep: issue 13, defect 4. A paced Transport over a memory store whose
// clock is stepped back 1 h: the request after the step waits what WaitTime said, a minute,
// not the hour until the clock catches up with the key (3 660 s before the fix, while
// WaitTime said 60 s). Sleeps are simulated (clock.Manual with Auto), so the figures are exact.
func TestPacedAcrossClockStep(t *testing.T) {
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

package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestStackedPacedOuterSlotAges (not fixed; run with RATEMONITOR_BREAK_REPRO=1): two paced
// layers on one store and key, outer 2/10s, inner 2/10s (shared) and 2/9s, the 9 s rule full
// (2 recorded at t0 by another sender). The outer layer records each request's 10 s slot when
// it grants it, the inner one then holds the request until its 9 s rule has room: the slot is
// counted from the outer grant, not from the send, so it frees early by the inner wait. Sends
// (simulated clock) at t0 + 9 s, 9 s and 18 s: three inside 10 s against 2/10s.
func TestStackedPacedOuterSlotAges(t *testing.T) {
	if os.Getenv("RATEMONITOR_BREAK_REPRO") == "" {
		t.Skip("known defect, not fixed: set RATEMONITOR_BREAK_REPRO=1 to reproduce")
	}
	clk := clock.NewManual(t0)
	clk.Auto = true
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	r1 := strategy.Rule{Limit: 2, Window: 10 * time.Second}
	r2 := strategy.Rule{Limit: 2, Window: 9 * time.Second}
	var sends []time.Duration
	base := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		sends = append(sends, clk.Now().Sub(t0))
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	key := WithKeyFunc(func(*http.Request) string { return "k" })
	inner := newTransport(t, base, WithRules(r1, r2), WithStore(mem), WithPacing(), key)
	outer := newTransport(t, inner, WithRules(r1), WithStore(mem), WithPacing(), key)
	s2, _ := rollingwindow.New(r2)
	if err := mem.Record(context.Background(), s2, "k", 2); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, "http://upstream.invalid/", nil)
		resp, err := outer.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i := range sends {
		in := 0
		for _, s := range sends[i:] {
			if s < sends[i]+10*time.Second {
				in++
			}
		}
		if in > 2 {
			t.Fatalf("sends at %v: %d within 10 s of %v, against 2/10s", sends, in, sends[i])
		}
	}
}

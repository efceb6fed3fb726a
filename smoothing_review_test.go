package ratemonitor

// The tests of this file come from the adversarial review (rev2) of issue 15: each comment
// describes the defect the reviewer found, as it was before its fix; the test asserts the
// fixed behaviour.

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestSmoothCancelRefundsOnlyUnpaidCharge: smoothed 60/min (b = 30, T ≈ 1.94 s). A reservation of
// 1 at t0 is paid off by t0 + T (the GCRA is idle again); at t0 + 10 T a burst of b = 30 goes.
// Cancelling the old reservation then refunds T from the new burst's TAT ("n·T unless
// reserved more than b·T ago"), so a 31st request goes at the same instant: b + 1 at once,
// though the smoothing "lets at most b go at once" (ErrBurstTooLarge's text) and the README
// says "30 at once from idle". On the memory store and on Redis (its script's GCRA, the
// store's clock overridden by the manual one).
func TestSmoothCancelRefundsOnlyUnpaidCharge(t *testing.T) {
	srv := redistest.Start(t)
	rule := strategy.Rule{Limit: 60, Window: time.Minute}
	T := strategy.SmoothInterval(rule)
	for _, name := range []string{"memory", "redis"} {
		clk := clock.NewManual(t0)
		var st cache.Store
		if name == "memory" {
			m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			st = m
		} else {
			r, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: "rev2-smooth", Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			st = r
		}
		tr := newTransport(t, nil, WithRules(rule), WithPacing(), WithSmoothing(), WithClock(clk), WithStore(st))
		ctx := context.Background()
		a, err := tr.Reserve(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(10 * T))
		for i := range 30 {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := tr.Reserve(wctx, "k", 1)
			cancel()
			if err != nil {
				t.Fatalf("%s: request %d of the burst at t0+10T: %v", name, i+1, err)
			}
		}
		if err := a.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := tr.WaitTime(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if w == 0 {
			t.Errorf("%s: after b = 30 at one instant and the cancel of a reservation paid off 9 T before, WaitTime(1) = 0: a 31st goes at that instant (want T = %v)", name, T)
		}
	}
}

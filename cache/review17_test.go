package cache

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestDropPinnedCheckRaisesHighWater (review of issue 17's change): a refused admission checks
// pinned keys for one no longer at its limit (dropPinned → atLimit), which reads a key's
// counters at the clock's instant. Unless that raises the entry's high-water instant (entry.hw),
// a clock step back of more than StepTolerance from that instant, but less from e.hw, skips the
// Rebase that the strategy on plain counters (Rebase before each operation, as the store did
// before issue 17) does, and the wait told is longer by the step (5.7 s instead of 4.5 s). Both
// ways in: dropPinned called alone, and the real trigger, a new key refused (ErrFull) by a store
// whose MaxCost the pinned key holds.
func TestDropPinnedCheckRaisesHighWater(t *testing.T) {
	for _, viaAdmission := range []bool{false, true} {
		t.Run(map[bool]string{false: "dropPinned", true: "refused admission"}[viaAdmission], func(t *testing.T) {
			clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
			cfg := MemoryConfig{Clock: clk}
			if viaAdmission {
				cfg.MaxCost = 700 // room for k alone
			}
			m := newMemory(t, cfg)
			s := mustStrategy(t, strategy.Rule{Limit: 5, Window: 10 * time.Second})
			ctx := context.Background()
			ref := s.NewCounters()
			rec := func(n int) {
				if err := m.Record(ctx, s, "k", n); err != nil {
					t.Fatal(err)
				}
				s.Record(ref, clk.Now(), n)
			}
			rec(5) // at its limit: pinned, limitUntil = t0+10s
			clk.Advance(5 * time.Second)
			rec(8) // over the limit; limitUntil (t0+10s) is not recomputed while ahead
			clk.Advance(5500 * time.Millisecond)
			// t0+10.5s: the first 5 have expired, 8 still count: still at its limit.
			if m.pinnedN.Load() != 1 {
				t.Fatalf("%d pinned, want 1", m.pinnedN.Load())
			}
			if viaAdmission {
				if err := m.Record(ctx, s, "other", 1); !errors.Is(err, ErrFull) {
					t.Fatalf("admitting another key: %v, want ErrFull (only k, at its limit, is held)", err)
				}
			} else if m.dropPinned(&shard{}) {
				t.Fatal("dropped a key at its limit")
			}
			s.Wait(ref, clk.Now(), 1)          // what the check did to k's counters: read them at t0+10.5s
			clk.Step(-1200 * time.Millisecond) // back 1.2 s > StepTolerance, from the instant the check read
			now := clk.Now()
			engine.Rebase(ref, nil, now)
			want, _ := s.Reserve(ref, now, 1)
			got, err := m.Reserve(ctx, s, "k", 1)
			if err != nil || got != want {
				t.Fatalf("Reserve after the step = %+v, %v; strategy on plain counters (rebased) %+v", got, err, want)
			}
		})
	}
}

// TestReportedOutlivesOtherStrategy: a day rule's figure reported by Sync is shown by
// Peek while it is less than a window old. A later operation under another strategy (a minute
// rule, stacked Transports on one key) must not shorten how long the sweep keeps the entry.
func TestReportedOutlivesOtherStrategy(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{Clock: clk})
	day := mustStrategy(t, strategy.Rule{Limit: 5000, Window: 24 * time.Hour})
	minute := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	if err := m.Sync(ctx, day, "k", engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 4000, Used: 0}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Peek(ctx, minute, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	m.sweepAll()
	snap, err := m.Peek(ctx, day, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Usage[0].Reported; got != 4000 {
		t.Fatalf("10 min after a day rule's report: Reported = %d, want 4000 (the entry was swept: %+v)", got, snap.Usage[0])
	}
}

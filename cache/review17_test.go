package cache

import (
	"context"
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
// before issue 17) does, and the wait told is longer by the step (5.7 s instead of 4.5 s).
func TestDropPinnedCheckRaisesHighWater(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk})
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
	if m.dropPinned(&shard{}) {
		t.Fatal("dropped a key at its limit")
	}
	s.Wait(ref, clk.Now(), 1)          // what dropPinned's check did to the store's counters: read them at t0+10.5s
	clk.Step(-1200 * time.Millisecond) // back 1.2 s > StepTolerance, from the instant dropPinned read
	now := clk.Now()
	engine.Rebase(ref, nil, now)
	want, _ := s.Reserve(ref, now, 1)
	got, err := m.Reserve(ctx, s, "k", 1)
	if err != nil || got != want {
		t.Fatalf("Reserve after the step = %+v, %v; strategy on plain counters (rebased) %+v", got, err, want)
	}
}

// TestDropPinnedCheckViaAdmission: the same through the real trigger: a store whose MaxCost
// is held by one pinned key refuses a new key (ErrFull) after dropPinned has checked the pinned
// one at the clock's instant; a step back 1.2 s from there is not rebased and the pinned key's
// wait is told 1.2 s too long.
func TestDropPinnedCheckViaAdmission(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk, MaxCost: 700})
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: 10 * time.Second})
	ctx := context.Background()
	ref := s.NewCounters()
	rec := func(n int) {
		if err := m.Record(ctx, s, "k", n); err != nil {
			t.Fatal(err)
		}
		s.Record(ref, clk.Now(), n)
	}
	rec(5)
	clk.Advance(5 * time.Second)
	rec(8)
	clk.Advance(5500 * time.Millisecond)
	if m.pinnedN.Load() != 1 {
		t.Fatalf("%d pinned, want 1", m.pinnedN.Load())
	}
	err := m.Record(ctx, s, "other", 1) // no room: dropPinned looks at k, still at its limit
	t.Logf("admitting another key: %v", err)
	s.Wait(ref, clk.Now(), 1) // what that look did to k's counters
	clk.Step(-1200 * time.Millisecond)
	now := clk.Now()
	engine.Rebase(ref, nil, now)
	want, _ := s.Reserve(ref, now, 1)
	got, err := m.Reserve(ctx, s, "k", 1)
	if err != nil || got != want {
		t.Fatalf("Reserve after the step = %+v, %v; strategy on plain counters (rebased) %+v", got, err, want)
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

package cache

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestPinnedCostDuringPinning replays, step by step, an interleaving of two operations on one
// key: the first leaves the key at its limit and pins it (startPin under the entry's lock, then
// finishPin once it has let go); between the two, the second records in a new bucket, which
// grows the entry's cost. The pinned tier must then be charged the entry's cost once. Before
// the fix the second operation added its growth to the pinned tier's cost and finishPin added
// the entry's whole (grown) cost, so the growth was charged twice, and stayed charged (taken
// out of ristretto's MaxCost) after the key left the pinned tier.
func TestPinnedCostDuringPinning(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 2, Window: time.Minute})
	ctx := context.Background()
	if err := m.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	e, ok := m.lookup(ctx, "k")
	if !ok {
		t.Fatal("key not held")
	}
	// Operation 1: records the second request under the entry's lock and starts the pin.
	e.mu.Lock()
	now := m.apply(e, s, func(cs []engine.Counter, _ *engine.Upstream, now time.Time) { s.Record(cs, now, 1) })
	e.maintain(s, now)
	if !e.atLimit(s, now) || !m.startPin(e) {
		e.mu.Unlock()
		t.Fatal("the key at its limit was not pinned")
	}
	e.mu.Unlock()
	// Operations 2…, before operation 1 finishes the pin: records a second apart, each in a new
	// bucket, until the entry's cost grows (its bucket slice is reallocated).
	e.mu.Lock()
	before := e.cost
	e.mu.Unlock()
	grown := before
	for i := 0; i < 30 && grown == before; i++ {
		clk.Advance(time.Second)
		if err := m.Record(ctx, s, "k", 1); err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		grown = e.cost
		e.mu.Unlock()
	}
	if grown <= before {
		t.Fatalf("30 records in new buckets did not grow the cost (%d → %d): the test needs it to", before, grown)
	}
	m.finishPin(e)
	if n, c := m.pinnedN.Load(), m.pinnedCost.Load(); n != 1 || c != int64(grown) {
		t.Fatalf("pinned tier: %d entries, %d bytes; want 1 entry of %d bytes", n, c, grown)
	}
	// After its window the key leaves the pinned tier, and so does all of its cost.
	clk.Advance(2 * time.Minute)
	if err := m.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if n, c := m.pinnedN.Load(), m.pinnedCost.Load(); n != 0 || c != 0 {
		t.Fatalf("after the key left the pinned tier: %d entries, %d bytes; want 0, 0", n, c)
	}
}

// TestPinnedUnderTwoStrategies: stacked Transports use two strategies on one key (the outer
// one's minute rule, the inner one's day rule). A key at its minute limit stays pinned when the
// next operation on it is the day strategy's, so that a flood of new keys cannot evict it and
// give its client a full minute again. Before the fix the day strategy's operation found the
// key below its (day) limit and unpinned it; the flood then evicted it, and the minute rule
// granted 2 more at once.
func TestPinnedUnderTwoStrategies(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{MaxCost: 64 << 10, MaxKeys: 1000, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	minute := mustStrategy(t, strategy.Rule{Limit: 2, Window: time.Minute})
	day := mustStrategy(t, strategy.Rule{Limit: 1000, Window: 24 * time.Hour})
	ctx := context.Background()
	for range 2 {
		if res, err := m.Reserve(ctx, minute, "k", 1); err != nil || !res.Allowed {
			t.Fatalf("reserve: %+v, %v", res, err)
		}
		if err := m.Record(ctx, day, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.pinnedN.Load(); n != 1 {
		t.Fatalf("key at its minute limit: %d pinned, want 1", n)
	}
	for i := range 2000 {
		if err := m.Record(ctx, day, "flood"+strconv.Itoa(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := m.Reserve(ctx, minute, "k", 1); err != nil || res.Allowed {
		t.Fatalf("after a flood, the key at its minute limit: %+v, %v; want refused (stats %+v)", res, err, m.Stats())
	}
}

// apply runs fn on e's counters for s at the store's instant and returns that instant, as an
// operation whose records the store cannot tell (its room is forgotten). The caller holds e.mu.
func (m *Memory) apply(e *entry, s *engine.Strategy, fn func([]engine.Counter, *engine.Upstream, time.Time)) time.Time {
	o := &op{other: true}
	now := m.applyOp(e, s, o, fn)
	e.spend(s, o)
	return now
}

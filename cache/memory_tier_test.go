package cache

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestPinnedCostChargedOnceWhilePinning replays, step by step, an interleaving of two operations on
// one key: the first leaves the key at its limit and pins it (startPin under the entry's lock, then
// finishPin once it has let go); between the two, the second records in a new bucket, which grows
// the entry's cost. The pinned tier must then be charged the entry's cost once. Before the fix the
// second operation added its growth to the pinned tier's cost and finishPin added the entry's whole
// (grown) cost, so the growth was charged twice, and stayed charged (taken out of ristretto's
// MaxCost) after the key left the pinned tier.
func TestPinnedCostChargedOnceWhilePinning(t *testing.T) {
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

// TestKeyAtLimitStaysPinnedUnderOtherStrategy: stacked Transports use two strategies on one key
// (the outer one's minute rule, the inner one's day rule). A key at its minute limit stays pinned
// when the next operation on it is the day strategy's, so that a flood of new keys cannot evict it
// and give its client a full minute again. Before the fix the day strategy's operation found the
// key below its (day) limit and unpinned it; the flood then evicted it, and the minute rule granted
// 2 more at once.
func TestKeyAtLimitStaysPinnedUnderOtherStrategy(t *testing.T) {
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

// TestFullOnlyWhenAllPinned: when every byte is held by keys at their limits, a new key gets
// ErrFull (and nothing is evicted); once their windows pass, new keys are admitted again.
func TestFullOnlyWhenAllPinned(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{MaxCost: 64 << 10, MaxKeys: 1000, Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 2, Window: time.Minute})
	ctx := context.Background()
	full := -1
	for i := range 1000 {
		if err := m.Record(ctx, s, "k"+strconv.Itoa(i), 2); errors.Is(err, ErrFull) {
			full = i
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if full < 0 {
		t.Fatal("1000 keys at their limits fitted in 64 KiB")
	}
	n, cost := m.charged()
	if n != int64(full) || m.pinnedN.Load() != n || cost > 64<<10 {
		t.Fatalf("ErrFull at key %d with %d keys held (%d pinned, %d bytes)", full, n, m.pinnedN.Load(), cost)
	}
	if st := m.Stats(); st.EvictedLive != 0 || st.Rejected != 1 {
		t.Fatalf("stats %+v, want no live eviction and one rejection", st)
	}
	for i := range full {
		if u := used(t, m, s, "k"+strconv.Itoa(i)); u[0] != 2 {
			t.Fatalf("k%d: used %d, want 2", i, u[0])
		}
	}
	clk.Advance(time.Minute)
	if err := m.Record(ctx, s, "late", 1); err != nil {
		t.Fatalf("after every pinned key's window passed: %v", err)
	}
}

// TestPinnedKeyLeavesWhenBelowLimit: a key that reaches its limit moves to the pinned tier and
// back to ristretto on its first operation after its window has passed; a pause pins too.
func TestPinnedKeyLeavesWhenBelowLimit(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 3, Window: time.Minute})
	ctx := context.Background()
	tiers := func() (pinned, listed int64) { return m.pinnedN.Load(), m.listN.Load() }
	if err := m.Record(ctx, s, "k", 2); err != nil {
		t.Fatal(err)
	}
	if p, l := tiers(); p != 0 || l != 1 {
		t.Fatalf("below its limit: %d pinned, %d listed; want 0, 1", p, l)
	}
	if res, err := m.Reserve(ctx, s, "k", 1); err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	if p, l := tiers(); p != 1 || l != 0 || m.pinnedCost.Load() == 0 {
		t.Fatalf("at its limit: %d pinned (%d bytes), %d listed; want 1, 0", p, m.pinnedCost.Load(), l)
	}
	if u := used(t, m, s, "k"); u[0] != 3 {
		t.Fatalf("pinned key: used %d, want 3", u[0])
	}
	clk.Advance(time.Minute)
	if err := m.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if p, l := tiers(); p != 0 || l != 1 || m.pinnedCost.Load() != 0 {
		t.Fatalf("after its window: %d pinned (%d bytes), %d listed; want 0, 1", p, m.pinnedCost.Load(), l)
	}
	if u := used(t, m, s, "k"); u[0] != 1 {
		t.Fatalf("back in ristretto: used %d, want 1", u[0])
	}
	if err := m.Sync(ctx, s, "k", engine.Update{Pause: time.Second}); err != nil {
		t.Fatal(err)
	}
	if p, _ := tiers(); p != 1 {
		t.Fatalf("paused: %d pinned, want 1", p)
	}
}

// TestTiersConsistentUnderContention: goroutines drive their own keys to their limits (pinning
// them), release some requests (so that some pinned keys are below their limits) and flood new keys
// into a small store, while the janitor's sweep runs. No operation fails, no key is evicted after
// it was refused for being at its limit, and at the end each tier's count and cost match what it
// holds.
func TestTiersConsistentUnderContention(t *testing.T) {
	var refused sync.Map // keys refused at their limit; Release never follows a refusal
	var violations atomic.Int64
	m := newMemory(t, MemoryConfig{MaxCost: 256 << 10, MaxKeys: 1000, Logger: slog.New(slog.DiscardHandler),
		OnEvictLive: func(k string) {
			if _, ok := refused.Load(k); ok {
				violations.Add(1)
			}
		}})
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: time.Minute})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 400 {
				hot := "hot-" + strconv.Itoa(g) + "-" + strconv.Itoa(i%10)
				res, err := m.Reserve(ctx, s, hot, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					refused.Store(hot, true)
				} else if i%7 == 0 {
					if _, ok := refused.Load(hot); !ok {
						if err := m.Release(ctx, s, hot, res.At, 1); err != nil {
							t.Error(err)
							return
						}
					}
				}
				if err := m.Record(ctx, s, "flood-"+strconv.Itoa(g)+"-"+strconv.Itoa(i), 1); err != nil {
					t.Error(err)
					return
				}
				if i%100 == 99 {
					m.sweepTick()
				}
			}
		})
	}
	wg.Wait()
	if n := violations.Load(); n != 0 {
		t.Errorf("%d keys at their limit evicted while flood keys could go", n)
	}
	n := 0
	refused.Range(func(k, _ any) bool {
		n++
		if res, err := m.Reserve(ctx, s, k.(string), 1); err != nil || res.Allowed {
			t.Errorf("%s, refused at its limit, now: %+v, %v", k, res, err)
		}
		return true
	})
	if n == 0 {
		t.Fatal("no key reached its limit")
	}
	m.life.Lock() // no janitor round meanwhile
	defer m.life.Unlock()
	var pinnedN, pinnedCost, listN int64
	check := func(v *entry, pinned bool) {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.pinned != pinned || v.listed == pinned || v.evicted || v.pinning {
			t.Errorf("%s (pinned tier %v): pinned %v listed %v evicted %v pinning %v", v.key, pinned, v.pinned, v.listed, v.evicted, v.pinning)
		}
		if pinned {
			pinnedN++
			pinnedCost += int64(v.cost)
		}
	}
	for i := range m.shard {
		for _, v := range m.shard[i].sample(-1) {
			check(v, true)
		}
	}
	m.listMu.Lock()
	var listed []*entry
	for v := m.head; v != nil; v = v.next {
		listed = append(listed, v)
	}
	m.listMu.Unlock()
	for _, v := range listed {
		listN++
		check(v, false)
	}
	if pinnedN != m.pinnedN.Load() || pinnedCost != m.pinnedCost.Load() || listN != m.listN.Load() {
		t.Errorf("pinned %d (%d bytes), listed %d; counters say %d (%d bytes), %d", pinnedN, pinnedCost, listN,
			m.pinnedN.Load(), m.pinnedCost.Load(), m.listN.Load())
	}
	if st := m.Stats(); st.Rejected != 0 {
		t.Errorf("stats %+v: want no rejection", st)
	}
	t.Logf("%d keys refused at their limit, %d pinned, %d in ristretto, %+v", n, pinnedN, listN, m.Stats())
}

// TestRoomPinsAtLimit: the entry's room (entry.room) spares the check for the limit after a
// record while room is left; the key must still move to the pinned tier on the very record that
// leaves it at its limit, and back once its window frees a slot. Records of random sizes at
// random instants, with peeks between: after each record the key is pinned exactly when one
// more request would wait.
func TestRoomPinsAtLimit(t *testing.T) {
	for _, limit := range []int{3, 40, 300} { // room below, near and above its 255 cap
		clk := clock.NewManual(t0)
		m := newMemory(t, MemoryConfig{Clock: clk})
		s := mustStrategy(t, strategy.Rule{Limit: limit, Window: 10 * time.Second})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(uint64(limit), 1))
		pins := 0
		for step := range 2000 {
			clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
			if rng.IntN(4) == 0 {
				if _, err := m.Peek(ctx, s, "k", 1); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := m.Record(ctx, s, "k", 1+rng.IntN(max(1, limit/15))); err != nil {
				t.Fatal(err)
			}
			e, _ := m.lookup(ctx, "k")
			e.mu.Lock()
			full := s.Wait(e.counters, clk.Now(), 1) > 0
			pinned := e.pinned
			e.mu.Unlock()
			if pinned != full {
				t.Fatalf("limit %d step %d: pinned %v, but one more request waits: %v", limit, step, pinned, full)
			}
			if pinned {
				pins++
			}
		}
		if pins == 0 {
			t.Fatalf("limit %d: the key never reached its limit: the test does not test the pinning", limit)
		}
	}
}

package cache

import (
	"bytes"
	"context"
	"encoding"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestFastGrantMatchesGeneral: fastGrant leaves exactly the state and gives exactly the answers
// update's general path does. Two stores on one stepped clock (forward, and now and then back
// within and beyond StepTolerance) run the same random operations (Record, Reserve, Peek, Release,
// Admit, Sync with pauses and figures) on a few keys under strategies of one, two and three slots,
// a second strategy on the same keys, a smoothed one and a fixed window; the store made with
// general set never takes the fast path. Every answer must be equal, and after every operation so
// must every field of the key's entry that update writes and each counter's state (encoded, or its
// fields). The fast path must have run for a good share of the operations, or the test tests
// nothing.
func TestFastGrantMatchesGeneral(t *testing.T) {
	minute := mustStrategy(t, strategy.Rule{Limit: 30, Window: 10 * time.Second})
	xero := mustStrategy(t, strategy.Rule{Limit: 40, Window: 10 * time.Second},
		strategy.Rule{Limit: 150, Window: time.Minute, Granularity: 10 * time.Second})
	three := mustStrategy(t, strategy.Rule{Limit: 20, Window: 5 * time.Second},
		strategy.Rule{Limit: 60, Window: 30 * time.Second}, strategy.Rule{Limit: 300, Window: time.Hour, Granularity: time.Minute})
	smooth, err := minute.Smoothed()
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := engine.New(storetest.FixedWindow, strategy.Rule{Limit: 30, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	strats := []*engine.Strategy{minute, xero, three, smooth, fixed}
	keys := []string{"a", "b", "c"}
	ctx := context.Background()
	var fast atomic.Int64
	total := 0
	for seed := range 30 {
		rng := rand.New(rand.NewPCG(17, uint64(seed)))
		clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
		f, g := newMemory(t, MemoryConfig{Clock: clk}), newMemory(t, MemoryConfig{Clock: clk})
		f.fastHits, g.general = &fast, true
		// Each key keeps to its first strategy most of the time, as a Transport's keys do.
		home := map[string]*engine.Strategy{}
		for _, k := range keys {
			home[k] = strats[rng.IntN(len(strats))]
		}
		var ats []time.Time
		for step := range 400 {
			switch r := rng.IntN(40); {
			case r < 24:
				clk.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
			case r == 24:
				clk.Step(-time.Duration(rng.IntN(3000)) * time.Millisecond)
			}
			k := keys[rng.IntN(len(keys))]
			s := home[k]
			if rng.IntN(20) == 0 {
				s = strats[rng.IntN(len(strats))]
			}
			n := 1
			if rng.IntN(4) == 0 {
				n = 1 + rng.IntN(min(s.MaxBurst(), 6))
			}
			where := fmt.Sprintf("seed %d step %d key %s", seed, step, k)
			var fa, ga any
			var fe, ge error
			switch r := rng.IntN(20); {
			case r < 10:
				var fr, gr engine.Result
				fr, fe = f.Reserve(ctx, s, k, n)
				gr, ge = g.Reserve(ctx, s, k, n)
				fa, ga = fr, gr
				if fr.Allowed {
					ats = append(ats, fr.At)
				}
			case r < 15:
				fe, ge = f.Record(ctx, s, k, n), g.Record(ctx, s, k, n)
			case r < 17:
				var fp, gp strategy.Snapshot
				fp, fe = f.Peek(ctx, s, k, 1)
				gp, ge = g.Peek(ctx, s, k, 1)
				fa, ga = fp, gp
			case r == 17 && len(ats) > 0:
				at := ats[rng.IntN(len(ats))]
				fe, ge = f.Release(ctx, s, k, at, 1), g.Release(ctx, s, k, at, 1)
			case r == 18:
				var fd, gd strategy.Decision
				fd, fe = f.Admit(ctx, s, k, 1)
				gd, ge = g.Admit(ctx, s, k, 1)
				fa, ga = fd, gd
			default:
				u := engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: rng.IntN(5), Used: 1 + rng.IntN(6)}}}
				if rng.IntN(3) == 0 {
					u.Pause = time.Duration(rng.IntN(2000)) * time.Millisecond
				}
				fe, ge = f.Sync(ctx, s, k, u), g.Sync(ctx, s, k, u)
			}
			total++
			if fe != nil || ge != nil || fmt.Sprint(fa) != fmt.Sprint(ga) {
				t.Fatalf("%s: fast path answered %+v, %v; general path %+v, %v", where, fa, fe, ga, ge)
			}
			if fs, gs := entryState(t, f, k), entryState(t, g, k); fs != gs {
				t.Fatalf("%s: entry after the fast path:\n%s\nafter the general path:\n%s", where, fs, gs)
			}
		}
	}
	t.Logf("fast path: %d of %d operations", fast.Load(), total)
	if hits := fast.Load(); hits < int64(total)/5 {
		t.Fatalf("the fast path ran %d times in %d operations: the test does not test it", hits, total)
	}
}

// entryState prints every field of key's entry in m that an operation writes, and the encoded state
// of each of its counters (encoded when it can be, else its fields) ("none" when m holds no state
// for key).
func entryState(t *testing.T, m *Memory, key string) string {
	t.Helper()
	e, ok := m.lookup(context.Background(), key)
	if !ok {
		return "none"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var b bytes.Buffer
	fmt.Fprintf(&b, "hw %d limitUntil %d room %d flags %b pinned %v cost %d more %v counters %d\n",
		e.hw, e.limitUntil, e.room, e.flags, e.pinned, e.cost, e.more != nil, len(e.counters))
	if x := e.more; x != nil {
		fmt.Fprintf(&b, "more: last %p ids %v synced %v up %+v\n", x.last, x.ids, x.synced, x.up)
	}
	// What fastGrant relies on instead of checking: a key with room is neither paused nor
	// before its limitUntil, and base is the strategy last used on it.
	if e.room > 0 && (e.limitUntil > e.hw || e.pausedUntil().UnixNano() > e.hw || e.strat() != e.base) {
		t.Fatalf("key %s has room %d at %d, but limitUntil is %d, its pause ends at %v, and the last strategy is %p (base %p)",
			key, e.room, e.hw, e.limitUntil, e.pausedUntil(), e.strat(), e.base)
	}
	for i, c := range e.counters {
		if bm, ok := c.(encoding.BinaryMarshaler); ok {
			enc, err := bm.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "counter %d: %x\n", i, enc)
			continue
		}
		fmt.Fprintf(&b, "counter %d: %+v\n", i, reflect.ValueOf(c).Elem().Interface())
	}
	return b.String()
}

// TestNoAllocsOnHeldKey: Reserve and Record on a key the store holds allocate nothing.
func TestNoAllocsOnHeldKey(t *testing.T) {
	m := newMemory(t, MemoryConfig{Clock: clock.Real()})
	ctx := context.Background()
	for _, s := range []struct {
		name  string
		rules []strategy.Rule
	}{
		{"open", []strategy.Rule{{Limit: 1 << 30, Window: time.Minute}}},
		{"60per1m", []strategy.Rule{{Limit: 60, Window: time.Minute}}},
		{"xero", []strategy.Rule{{Limit: 60, Window: time.Minute, Margin: time.Second}, {Limit: 5000, Window: 24 * time.Hour}}},
	} {
		st := mustStrategy(t, s.rules...)
		key := "tenant-" + s.name
		for range 200 { // the logs reach their size, the key its tier
			if err := m.Record(ctx, st, key, 1); err != nil {
				t.Fatal(err)
			}
		}
		if n := testing.AllocsPerRun(1000, func() {
			if _, err := m.Reserve(ctx, st, key, 1); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Reserve allocates %v times per call, want 0", s.name, n)
		}
		if n := testing.AllocsPerRun(1000, func() {
			if err := m.Record(ctx, st, key, 1); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Record allocates %v times per call, want 0", s.name, n)
		}
	}
}

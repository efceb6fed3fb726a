package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestRepeatedRefusalsExact: a key at its limit answers repeated Reserves of 1 without its
// counters (entry.refusing). Random traffic on such keys, with the clock moving forward and
// now and then back (within and beyond StepTolerance), and with records (over the limit too),
// releases, peeks and a second strategy mixed in, gets exactly the answers the strategy gives
// on plain counters (with Rebase before each operation, as the store does). (No Sync: after a
// write the store reads the counters once more, to pin a key at its limit, which moves their
// time to now; the reference does not model that, which only a Sync followed by a step back
// would show.)
func TestRepeatedRefusalsExact(t *testing.T) {
	minute := strategy.Rule{Limit: 5, Window: 10 * time.Second}
	strategies := [][]*engineStrategy{
		{mustStrategy(t, minute)},
		{mustStrategy(t, minute, strategy.Rule{Limit: 12, Window: time.Minute})},
		{mustStrategy(t, minute), mustStrategy(t, strategy.Rule{Limit: 12, Window: time.Minute})},
	}
	skippedSeen := 0
	for si, ss := range strategies {
		for seed := range 40 {
			rng := rand.New(rand.NewPCG(uint64(si), uint64(seed)))
			clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
			m := newMemory(t, MemoryConfig{Clock: clk})
			ctx := context.Background()
			refCounters := map[*engineStrategy][]engine.Counter{}
			var ids []string
			var all []engine.Counter
			up := &engine.Upstream{}
			ref := func(s *engineStrategy) []engine.Counter {
				// The store's counters per ID, shared between strategies, as the store keeps them.
				if cs, ok := refCounters[s]; ok {
					return cs
				}
				var cs []engine.Counter
				for j := range s.Slots() {
					var c engine.Counter
					for i, id := range ids {
						if id == s.CounterID(j) {
							c = all[i]
						}
					}
					if c == nil {
						c = s.NewCounter(j)
						ids, all = append(ids, s.CounterID(j)), append(all, c)
					}
					cs = append(cs, c)
				}
				refCounters[s] = cs
				return cs
			}
			// The key is held from the start: a store answers a Peek of a key it does not hold
			// from empty counters it then drops, which the reference's counters would not do.
			if err := m.Record(ctx, ss[0], "k", 1); err != nil {
				t.Fatal(err)
			}
			ss[0].Record(ref(ss[0]), clk.Now(), 1)
			var lastAt []time.Time
			for step := range 400 {
				switch r := rng.IntN(20); {
				case r < 12:
					clk.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
				case r < 14: // stepped back, within StepTolerance or beyond it
					clk.Step(-time.Duration(rng.IntN(1500)) * time.Millisecond)
				}
				s := ss[rng.IntN(len(ss))]
				cs := ref(s)
				now := clk.Now()
				engine.Rebase(all, up, now)
				where := fmt.Sprintf("strategies %d seed %d step %d", si, seed, step)

				switch r := rng.IntN(20); {
				case r < 14:
					got, err := m.Reserve(ctx, s, "k", 1)
					want, _ := s.Reserve(cs, up, now, 1)
					if err != nil || got != want {
						t.Fatalf("%s: Reserve = %+v, %v; want %+v", where, got, err, want)
					}
					if got.Allowed {
						lastAt = append(lastAt, got.At)
					}
				case r < 16: // monitoring: a key over its limit waits for several buckets
					n := 1 + rng.IntN(3)
					if err := m.Record(ctx, s, "k", n); err != nil {
						t.Fatal(err)
					}
					s.Record(cs, now, n)
				case r < 17 && len(lastAt) > 0:
					at := lastAt[rng.IntN(len(lastAt))]
					if err := m.Release(ctx, s, "k", at, 1); err != nil {
						t.Fatal(err)
					}
					s.Release(cs, at, 1)
				default:
					got, err := m.Peek(ctx, s, "k", 1)
					want, _ := s.Peek(cs, up, now, 1)
					if err != nil || !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: Peek = %+v, %v; want %+v", where, got, err, want)
					}
				}
				if e, ok := m.lookup(ctx, "k"); ok {
					e.mu.Lock()
					if e.flags&skipped != 0 {
						skippedSeen++
					}
					e.mu.Unlock()
				}
			}
		}
	}
	if skippedSeen == 0 {
		t.Fatal("no refusal was answered without the counters: the test does not reach the shortcut")
	}
	t.Logf("%d operations left refusals answered without the counters", skippedSeen)
}

type engineStrategy = engine.Strategy

// TestRepeatedRefusalKeepsTimeAfterClockBack: refusals answered without the counters still move the
// key's time as a full answer would: after one at 10.5 s (which the bucket recorded at 0 s no
// longer counts at), a Peek with the clock stepped back to 9.8 s (within StepTolerance) is
// answered at 10.5 s, without that bucket.
func TestRepeatedRefusalKeepsTimeAfterClockBack(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: 10 * time.Second})
	ctx := context.Background()
	for i, n := range []int{2, 2, 3} { // 7 over a limit of 5: the key waits for two buckets
		if i > 0 {
			clk.Advance(time.Second)
		}
		if err := m.Record(ctx, s, "k", n); err != nil {
			t.Fatal(err)
		}
	}
	for _, at := range []time.Duration{3 * time.Second, 10500 * time.Millisecond} {
		clk.Advance(at - clk.Now().Sub(t0))
		res, err := m.Reserve(ctx, s, "k", 1)
		if want := 11*time.Second - at; err != nil || res.Allowed || res.Wait != want {
			t.Fatalf("Reserve at %v: %+v, %v; want refused with a wait of %v", at, res, err, want)
		}
	}
	e, _ := m.lookup(ctx, "k")
	e.mu.Lock()
	wasSkipped := e.flags&skipped != 0
	e.mu.Unlock()
	if !wasSkipped {
		t.Fatal("the second refusal was answered from the counters: the test does not reach the shortcut")
	}
	clk.Step(-700 * time.Millisecond) // to 9.8 s
	if u := used(t, m, s, "k"); u[0] != 5 {
		t.Fatalf("used %d after the clock stepped back to 9.8 s, want 5 (answered at 10.5 s, the latest instant the key has seen)", u[0])
	}
}

package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestMemoryNanoPathExact: the store's Record and Reserve run on int64 instants
// (engine.Strategy.Nanos); random bursts of any size, records over the limit, releases and a
// clock that moves forward and now and then back (within and beyond StepTolerance) get exactly
// the answers Strategy.Reserve gives on the time.Time path over plain counters (Rebase before
// each operation, as the store does), Result.At included. After every operation the entry's
// room, when known, is a lower bound of what fits: a burst of that size does not wait on the
// plain counters (the room never admits what the strategy refuses).
func TestMemoryNanoPathExact(t *testing.T) {
	for si, rules := range [][]strategy.Rule{
		{{Limit: 5, Window: 10 * time.Second}},
		{{Limit: 40, Window: 10 * time.Second}, {Limit: 100, Window: time.Minute}},
		{{Limit: 600, Window: 10 * time.Second}},                                       // room at its 255 cap
		{{Limit: 30, Window: 10 * time.Second}, {Limit: 20, Window: 10 * time.Second}}, // one log, two limits
	} {
		s := mustStrategy(t, rules...)
		if !s.Nanos() {
			t.Fatal("a rolling-window strategy does not take the int64 path")
		}
		roomSeen := 0
		for seed := range 20 {
			rng := rand.New(rand.NewPCG(uint64(si), uint64(seed)))
			clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
			m := newMemory(t, MemoryConfig{Clock: clk})
			ctx := context.Background()
			cs := s.NewCounters()
			var lastAt []time.Time
			for step := range 500 {
				switch r := rng.IntN(20); {
				case r < 12:
					clk.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
				case r < 14:
					clk.Step(-time.Duration(rng.IntN(1500)) * time.Millisecond)
				}
				r := rng.IntN(10)
				if r == 9 && len(lastAt) == 0 {
					continue // no operation: the store rebases only when one comes, so no Rebase
				}
				now := clk.Now()
				engine.Rebase(cs, nil, now)
				where := fmt.Sprintf("strategy %d seed %d step %d", si, seed, step)
				switch {
				case r < 6:
					n := 1 + rng.IntN(s.MaxBurst())
					if rng.IntN(2) == 0 {
						n = 1
					}
					got, err := m.Reserve(ctx, s, "k", n)
					want, _ := s.Reserve(cs, nil, now, n)
					if err != nil || got != want {
						t.Fatalf("%s: Reserve(%d) = %+v, %v; want %+v", where, n, got, err, want)
					}
					if got.Allowed {
						lastAt = append(lastAt, got.At)
					}
				case r < 9:
					n := 1 + rng.IntN(4)
					if err := m.Record(ctx, s, "k", n); err != nil {
						t.Fatal(err)
					}
					s.Record(cs, now, n)
				default:
					at := lastAt[rng.IntN(len(lastAt))]
					if err := m.Release(ctx, s, "k", at, 1); err != nil {
						t.Fatal(err)
					}
					s.Release(cs, at, 1)
				}
				e, ok := m.lookup(ctx, "k")
				if !ok {
					continue
				}
				e.mu.Lock()
				room := int(e.room)
				e.mu.Unlock()
				if room > 0 {
					roomSeen++
					// The plain counters are what the store's hold; a copy keeps the reference's
					// time where the store's is.
					probe := s.NewCounters()
					for j := range cs {
						b, _ := cs[j].(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
						_ = probe[j].(interface{ UnmarshalBinary([]byte) error }).UnmarshalBinary(b)
					}
					if w := s.Wait(probe, now, min(room, s.MaxBurst())); w > 0 {
						t.Fatalf("%s: room %d, but a burst of %d waits %v", where, room, min(room, s.MaxBurst()), w)
					}
				}
			}
		}
		if roomSeen == 0 {
			t.Fatalf("strategy %d: the room was never known: the test does not test it", si)
		}
	}
}

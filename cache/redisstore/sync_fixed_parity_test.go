package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestSyncFixedSameOnMemoryAndRedis: random sequences of Record and Fixed reports (with and
// without a reset, used up or not, some with a pause) on rules of one and two windows leave
// exactly the same counts on the memory store and on Redis after every step.
func TestSyncFixedSameOnMemoryAndRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	strats := [][]strategy.Rule{
		{{Limit: 10, Window: time.Minute}},
		{{Limit: 5, Window: time.Second}, {Limit: 50, Window: time.Minute}},
		{{Limit: 1000, Window: 24 * time.Hour, Granularity: 10 * time.Second}},
		{{Limit: 20, Window: time.Minute, Headroom: 2}},
	}
	for si, rules := range strats {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, uint64(si)))
			clk := clock.NewManual(t0)
			mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			red := newStore(t, srv.Client(), Options{Clock: clk, Prefix: "p" + string(rune('a'+si)) + string(rune('A'+seed)) + ":"})
			s := mustStrategy(t, rules...)
			var log []string
			now := time.Duration(0)
			for step := range 60 {
				now += time.Duration(rng.IntN(int(rules[0].Window/time.Millisecond)/3+1)) * time.Millisecond
				clk.Set(t0.Add(now))
				switch rng.IntN(3) {
				case 0:
					n := 1 + rng.IntN(3)
					for _, st := range []cache.Store{mem, red} {
						st.Record(ctx, s, "k", n)
					}
					log = append(log, fmt.Sprintf("%v rec %d", now, n))
				default:
					r := rng.IntN(len(rules))
					lim := s.Rule(r).EffectiveLimit()
					rem := []int{0, 0, rng.IntN(lim + 1)}[rng.IntN(3)]
					var reset time.Duration
					if rng.IntN(2) == 0 {
						reset = time.Duration(rng.IntN(int(2*s.Rule(r).Window/time.Millisecond)+1)) * time.Millisecond
					}
					used := lim - rem
					if reset == 0 && rem == 0 {
						used = lim - 1
					}
					u := engine.Update{Reports: []engine.Report{{Rule: r, Remaining: rem, Used: used, Reset: reset, Fixed: true}}}
					if rng.IntN(4) == 0 {
						u.Pause = time.Duration(rng.IntN(5000)) * time.Millisecond
					}
					for _, st := range []cache.Store{mem, red} {
						if err := st.(cache.Syncer).Sync(ctx, s, "k", u); err != nil {
							t.Fatal(err)
						}
					}
					log = append(log, fmt.Sprintf("%v sync %+v", now, u))
				}
				{
					a, b := usedOf(t, mem, s, "k"), usedOf(t, red, s, "k")
					for i := range a {
						if a[i] != b[i] {
							t.Fatalf("strategy %d seed %d step %d : memory %v, redis %v (ops %v)", si, seed, step, a, b, log)
						}
					}
				}
			}
			mem.Close()
		}
	}
}

package sqlitestore

import (
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestSameAsMemory: random operations under each strategy give the same answers from the
// SQLite store (the upsert for the fixed window, encoded counters for the others) as from the
// memory store, which runs the strategy's own counters.
func TestSameAsMemory(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	sq, _ := open(t, Options{Clock: clk, PruneEvery: 7})
	algs := []engine.Algorithm{storetest.FixedWindow, storetest.TokenBucket, storetest.RollingWindow}
	var iteration int
	rapid.Check(t, func(rt *rapid.T) {
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		alg := algs[rapid.IntRange(0, len(algs)-1).Draw(rt, "alg")]
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit,
				Window:   time.Duration(rapid.IntRange(1, 30).Draw(rt, "w")) * time.Second,
				Margin:   time.Duration(rapid.IntRange(0, 2).Draw(rt, "m")) * time.Second,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := engine.New(alg, rules...)
		if err != nil {
			rt.Fatal(err)
		}
		iteration++
		storetest.Differential(rt, clk, mem, sq, s, "diff-"+strconv.Itoa(iteration), storetest.Ops{Admit: true})
	})
}

package cache_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/internal/storetest/conformance"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// memoryTarget opens a memory store per case, on the clock given (its own real clock when nil).
var memoryTarget = conformance.Target{
	Name: "memory",
	Open: func(t testing.TB, clk clock.Clock) conformance.Store {
		m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	},
}

// TestConformance runs the conformance suite (internal/storetest/conformance) on the memory
// store: contention, monitoring, middleware admissions, clock steps and the paced Transport,
// under every strategy.
func TestConformance(t *testing.T) { conformance.Run(t, memoryTarget) }

// TestSameAsReference drives the memory store and storetest.Ref (the strategies' own counters in
// a map under a mutex) with the same random operations under every strategy, on one manual
// clock, and requires identical answers: what the memory store adds (ristretto, costs, locks,
// expiry) changes no answer.
func TestSameAsReference(t *testing.T) {
	algs := []engine.Algorithm{storetest.FixedWindow, storetest.TokenBucket, storetest.RollingWindow}
	var iteration atomic.Int64
	// One memory store for every check (a new ristretto cache each time costs most of the run
	// under -race), on one clock that only moves forward, a new key each time.
	clk := clock.NewManual(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	rapid.Check(t, func(rt *rapid.T) {
		clk.Advance(time.Duration(rapid.Int64Range(0, 1e9).Draw(rt, "start µs")) * time.Microsecond)
		alg := algs[rapid.IntRange(0, len(algs)-1).Draw(rt, "alg")]
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			g := []time.Duration{time.Millisecond, 100 * time.Millisecond}[rapid.IntRange(0, 1).Draw(rt, "unit")]
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit, Granularity: g,
				Window:   time.Duration(rapid.IntRange(1, 50).Draw(rt, "w")) * g * 10,
				Margin:   time.Duration(rapid.IntRange(0, 3).Draw(rt, "m")) * g,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := engine.New(alg, rules...)
		if err != nil {
			rt.Skip(err)
		}
		key := "ref-" + strconv.FormatInt(iteration.Add(1), 10)
		storetest.Differential(rt, clk, storetest.NewRef(clk), mem, s, key, storetest.Ops{Admit: true, Sync: true})
	})
}

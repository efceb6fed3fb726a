package sqlitestore

import (
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestSmoothedSameAsMemory: under smoothed rolling-window strategies (engine.Strategy.Smoothed, whose
// GCRAs the store keeps as encoded counters like any other) random operations give the same
// answers from the SQLite store as from the memory store.
func TestSmoothedSameAsMemory(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC))
	sq, _ := open(t, Options{Clock: clk, PruneEvery: 7})
	var iteration int
	storetest.FewChecks(t, 25) // keeps the -race run short; -rapid.checks=N for more
	rapid.Check(t, func(rt *rapid.T) {
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit,
				Window:   time.Duration(rapid.IntRange(1, 30).Draw(rt, "w")) * time.Second,
				Margin:   time.Duration(rapid.IntRange(0, 2).Draw(rt, "m")) * time.Second,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := rollingwindow.New(rules...)
		if err != nil {
			rt.Fatal(err)
		}
		if s, err = s.Smoothed(); err != nil {
			rt.Fatal(err)
		}
		if err := sq.validate(s); err != nil {
			rt.Fatal(err)
		}
		iteration++
		storetest.Differential(rt, clk, mem, sq, s, "smooth-"+strconv.Itoa(iteration), storetest.Ops{Admit: true})
	})
}

package dynamostore

import (
	"strconv"
	"sync/atomic"
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
// GCRAs the store keeps as encoded counters in the key's item) random operations give the
// same answers from the DynamoDB store as from the memory store.
func TestSmoothedSameAsMemory(t *testing.T) {
	_, c := server(t)
	var iteration atomic.Int64
	storetest.FewChecks(t, 15) // keeps the -race run short; -rapid.checks=N for more
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual(t0.Add(time.Duration(rapid.Int64Range(0, 1e9).Draw(rt, "start µs")) * time.Microsecond))
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		dyn := newStore(t, c, Options{Clock: clk})
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			g := []time.Duration{time.Millisecond, 100 * time.Millisecond}[rapid.IntRange(0, 1).Draw(rt, "unit")]
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit, Granularity: g,
				Window:   time.Duration(rapid.IntRange(1, 50).Draw(rt, "w")) * g * 10,
				Margin:   time.Duration(rapid.IntRange(0, 3).Draw(rt, "m")) * g,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := rollingwindow.New(rules...)
		if err != nil {
			rt.Fatal(err)
		}
		if s, err = s.Smoothed(); err != nil {
			rt.Fatal(err)
		}
		if err := dyn.validate(s); err != nil {
			rt.Fatal(err)
		}
		key := "smooth-" + strconv.FormatInt(iteration.Add(1), 10)
		storetest.Differential(rt, clk, mem, dyn, s, key, storetest.Ops{Admit: true})
	})
}

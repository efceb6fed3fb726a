package cache

import (
	"math"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestFusedHeapMatchesCost (from the review of the fused entries) measures, from the heap,
// entries made as the store makes them (newEntry, then countersFor for each strategy used on the
// key), with no records, a few, or enough that the rings outgrow a fused entry's buffers, and
// checks that heap − heapCost is the same for every shape, fused or not, a second strategy
// stacked or not: heapCost then
// tracks the heap exactly, whatever the shape (the constant is entryOverhead less the entry
// struct itself, and the key's bytes, which are not allocated here).
func TestFusedHeapMatchesCost(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector pads allocations")
	}
	minute := strategy.Rule{Limit: 60, Window: time.Minute}
	day := strategy.Rule{Limit: 5000, Window: 24 * time.Hour}
	sec := strategy.Rule{Limit: 10, Window: time.Second}
	hour := strategy.Rule{Limit: 1000, Window: time.Hour}
	one := mustStrategy(t, minute)
	two := mustStrategy(t, minute, day)
	three := mustStrategy(t, minute, day, hour)
	other := mustStrategy(t, sec)
	shareMinute := mustStrategy(t, strategy.Rule{Limit: 30, Window: time.Minute}) // same log ID as minute
	otherTwo := mustStrategy(t, sec, hour)
	smooth, err := mustStrategy(t, minute, day).Smoothed()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		chain []*engine.Strategy
	}{
		{"one", []*engine.Strategy{one}},
		{"two", []*engine.Strategy{two}},
		{"three", []*engine.Strategy{three}},
		{"one+other", []*engine.Strategy{one, other}},
		{"two+other", []*engine.Strategy{two, other}},
		{"two+shared", []*engine.Strategy{two, shareMinute}},
		{"two+otherTwo", []*engine.Strategy{two, otherTwo}},
		{"two+other+otherTwo", []*engine.Strategy{two, other, otherTwo}},
		{"two+smooth", []*engine.Strategy{two, smooth}},
		{"one+two", []*engine.Strategy{one, two}},
	}
	// What heapCost counts besides the entry's own object: the rest of entryOverhead (index
	// slot, ristretto's item) and the key's bytes, rounded to 8; neither is allocated here.
	want := -float64(entryOverhead - int(unsafe.Sizeof(entry{})) + 8)
	const n = 20_000 // the runtime's own allocations meanwhile are then well under a byte an entry
	// Records 1 s apart under each strategy of the chain: none, 2 (the rings stay in a fused
	// entry's buffers), 20 (the minute logs outgrow them).
	for _, records := range []int{0, 2, 20} {
		for _, c := range cases {
			es := make([]*entry, n)
			before := heapAlloc()
			for k := range es {
				e := newEntry("k", 1, c.chain[0])
				for _, s := range c.chain {
					cs := e.countersFor(s)
					for i := range records {
						s.Record(cs, t0.Add(time.Duration(i)*time.Second), 1)
					}
				}
				es[k] = e
			}
			heap := perKey(before, heapAlloc(), n)
			diff := heap - float64(es[0].heapCost())
			t.Logf("%-20s %2d records: heap %6.1f B/entry, heapCost %4d, heap−cost %.1f", c.name, records, heap, es[0].heapCost(), diff)
			runtime.KeepAlive(es)
			if math.Abs(diff-want) >= 1 {
				t.Errorf("%s, %d records: heap − heapCost is %.1f, want %.0f", c.name, records, diff, want)
			}
		}
	}
}

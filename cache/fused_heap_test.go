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

// TestFusedHeapMatchesCost measures, from the heap,
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

// TestFusedHeapMatchesCostForRingShapes: heap − heapCost
// stays at TestFusedHeapMatchesCost's constant for shapes and traffic that test does not cover:
// rings of 3 and 5 buckets, rings that grow and shrink back (to a ring of their own, never to
// the entry's buffer), logs widened by a bucket of more than 65 535 requests, windows over 39 h
// (whose logs never use the buffer), and shifted logs.
func TestFusedHeapMatchesCostForRingShapes(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector pads allocations")
	}
	r := func(limit int, w, g time.Duration) strategy.Rule {
		return strategy.Rule{Limit: limit, Window: w, Granularity: g}
	}
	minute := mustStrategy(t, r(60, time.Minute, 0))
	fine := mustStrategy(t, r(60, 10*time.Second, 100*time.Millisecond)) // 101 buckets
	tiny := mustStrategy(t, r(5, 2*time.Second, time.Second))            // 3 buckets
	five := mustStrategy(t, r(5, 4*time.Second, time.Second))            // 5 buckets
	wide := mustStrategy(t, r(100, 48*time.Hour, time.Hour))
	minWide := mustStrategy(t, r(60, time.Minute, 0), r(100, 48*time.Hour, time.Hour))
	fineTiny := mustStrategy(t, r(60, 10*time.Second, 100*time.Millisecond), r(5, 2*time.Second, time.Second))
	two := mustStrategy(t, r(60, time.Minute, 0), r(5000, 24*time.Hour, 0))
	type step func(cs []engine.Counter)
	rec := func(n int, every time.Duration, count int, from time.Duration) step {
		return func(cs []engine.Counter) {
			for i := range count {
				for _, c := range cs {
					c.Add(t0.Add(from+time.Duration(i)*every), n)
				}
			}
		}
	}
	at := func(d time.Duration) step {
		return func(cs []engine.Counter) {
			for _, c := range cs {
				c.Used(t0.Add(d))
			}
		}
	}
	shift := func(d time.Duration) step {
		return func(cs []engine.Counter) {
			for _, c := range cs {
				c.Shift(d)
			}
		}
	}
	cases := []struct {
		name  string
		s     *engine.Strategy
		steps []step
	}{
		{"tiny 2 records", tiny, []step{rec(1, time.Second, 2, 0)}},
		{"tiny 10 records", tiny, []step{rec(1, time.Second, 10, 0)}},
		{"five 5 records (grows to 5)", five, []step{rec(1, time.Second, 1, 900*time.Millisecond), rec(1, time.Second, 4, time.Second)}},
		{"five 5 then back to 1", five, []step{rec(1, time.Second, 1, 900*time.Millisecond), rec(1, time.Second, 4, time.Second), at(7900 * time.Millisecond), rec(1, time.Second, 1, 8*time.Second)}},
		{"fine grows then shrinks", fine, []step{rec(1, 100*time.Millisecond, 80, 0), at(30 * time.Second), rec(1, time.Second, 1, 30*time.Second)}},
		{"fine grows then shrinks to 2", fine, []step{rec(1, 100*time.Millisecond, 80, 0), rec(1, 100*time.Millisecond, 2, 17900*time.Millisecond)}},
		{"minute count>65535", minute, []step{rec(70000, time.Second, 1, 0)}},
		{"minute count>65535 then shrinks", minute, []step{rec(70000, time.Second, 3, 0), at(5 * time.Minute), rec(1, time.Second, 1, 5*time.Minute)}},
		{"wide 2 records", wide, []step{rec(1, time.Hour, 2, 0)}},
		{"wide 10 records", wide, []step{rec(1, time.Hour, 10, 0)}},
		{"minute+wide", minWide, []step{rec(1, time.Second, 3, 0)}},
		{"minute+wide 20", minWide, []step{rec(1, time.Second, 20, 0)}},
		{"fine+tiny", fineTiny, []step{rec(1, 100*time.Millisecond, 20, 0)}},
		{"two shift back", two, []step{rec(1, time.Second, 3, 0), shift(-10 * time.Hour)}},
		{"two shift forward, part granule", two, []step{rec(1, time.Second, 3, 0), shift(1500 * time.Millisecond)}},
		{"minute shift", minute, []step{rec(1, 500*time.Millisecond, 6, 0), shift(-250 * time.Millisecond)}},
		{"two day count>65535", two, []step{rec(70000, time.Second, 1, 0)}},
	}
	want := -float64(entryOverhead - int(unsafe.Sizeof(entry{})) + 8)
	const n = 20_000 // the runtime's own allocations meanwhile are then well under a byte an entry
	for _, c := range cases {
		es := make([]*entry, n)
		before := heapAlloc()
		for k := range es {
			e := newEntry("k", 1, c.s)
			cs := e.countersFor(c.s)
			for _, st := range c.steps {
				st(cs)
			}
			es[k] = e
		}
		heap := perKey(before, heapAlloc(), n)
		diff := heap - float64(es[0].heapCost())
		t.Logf("%-34s heap %6.1f B/entry, heapCost %4d, heap−cost %.1f", c.name, heap, es[0].heapCost(), diff)
		runtime.KeepAlive(es)
		if math.Abs(diff-want) >= 1 {
			t.Errorf("%s: heap − heapCost is %.1f, want %.0f", c.name, diff, want)
		}
	}
}

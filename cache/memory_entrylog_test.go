package cache

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/rollinglog"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestFusedEntriesAreSizeClasses checks what heapCost assumes of the fused entries: each is as
// large as the objects it replaces (entry 128, a log 80 and its first ring of 4 buckets 32, a slice
// of two counters 32), and a Go size class, so that it holds on the heap exactly its size.
func TestFusedEntriesAreSizeClasses(t *testing.T) {
	if got := unsafe.Sizeof(entryLog{}); got != 240 {
		t.Errorf("entryLog is %d bytes, want 240 (entry 128 + Log 80 + ring 32)", got)
	}
	if got := unsafe.Sizeof(entryLogs{}); got != 384 {
		t.Errorf("entryLogs is %d bytes, want 384 (entry 128 + 2 counters 32 + 2 logs 160 + 2 rings 64)", got)
	}
	if raceEnabled {
		return // the race detector pads allocations
	}
	one := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	two := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 5000, Window: 24 * time.Hour})
	for _, c := range []struct {
		s    *engine.Strategy
		want float64
	}{{one, 240}, {two, 384}} {
		es := make([]*entry, 20_000) // the runtime's own allocations meanwhile: well under a byte an entry
		before := heapAlloc()
		for i := range es {
			es[i] = newEntry("k", 1, c.s)
		}
		got := perKey(before, heapAlloc(), len(es))
		runtime.KeepAlive(es)
		if math.Abs(got-c.want) >= 1 { // the runtime's own allocations meanwhile: a few bytes in all
			t.Errorf("%d slots: %.1f heap bytes an entry, want %.0f", c.s.Slots(), got, c.want)
		}
	}
}

// TestNewEntryFusesLogs checks which strategies get their logs inside the entry, that the fused
// entry starts as countersFor would have made its counters (but for each log's first ring, in
// the entry), and that its heapCost is that of the separate objects: 32 bytes a log more before
// the first record (the rings are there already), the same after it.
func TestNewEntryFusesLogs(t *testing.T) {
	minute := strategy.Rule{Limit: 60, Window: time.Minute}
	day := strategy.Rule{Limit: 5000, Window: 24 * time.Hour}
	three := mustStrategy(t, minute, day, strategy.Rule{Limit: 1000, Window: time.Hour})
	smooth, err := mustStrategy(t, minute).Smoothed()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		s     *engine.Strategy
		fused bool
	}{
		{"one log", mustStrategy(t, minute), true},
		{"two logs", mustStrategy(t, minute, day), true},
		{"two rules sharing a log", mustStrategy(t, minute, strategy.Rule{Limit: 30, Window: time.Minute}), true},
		{"three logs", three, false},
		{"smoothed", smooth, false},
		{"nil strategy", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEntry("k", 7, c.s)
			if e.key != "k" || e.hash != 7 {
				t.Fatalf("key %q hash %d", e.key, e.hash)
			}
			if !c.fused {
				if e.base != nil || e.counters != nil {
					t.Fatalf("base %v counters %v, want none before countersFor", e.base, e.counters)
				}
				return
			}
			if e.base != c.s || len(e.counters) != c.s.Slots() {
				t.Fatalf("base %p (want %p), %d counters (want %d)", e.base, c.s, len(e.counters), c.s.Slots())
			}
			for j, cn := range e.counters {
				l, ok := cn.(*rollinglog.Log)
				if !ok {
					t.Fatalf("counter %d is %T", j, cn)
				}
				want := c.s.NewCounter(j).(*rollinglog.Log)
				if l.Cost() != want.Cost()+logBuf*8 {
					t.Fatalf("counter %d costs %d, want %d: a new log and its buffer", j, l.Cost(), want.Cost()+logBuf*8)
				}
				// Every field as NewCounter sets it; the ring, of length 0 in both, prints as [].
				if got, w := fmt.Sprintf("%+v", *l), fmt.Sprintf("%+v", *want); got != w {
					t.Fatalf("counter %d is %s, want %s as NewCounter makes it", j, got, w)
				}
			}
			e = newEntry("k", 7, c.s)
			plain := &entry{key: "k", hash: 7}
			plain.countersFor(c.s)
			if got, want := e.heapCost(), plain.heapCost()+c.s.Slots()*logBuf*8; got != want {
				t.Fatalf("heapCost %d before a record, want %d: the separate objects' and the rings in the entry", got, want)
			}
			for _, x := range []*entry{e, plain} {
				c.s.Record(x.counters, t0, 1)
			}
			if got, want := e.heapCost(), plain.heapCost(); got != want {
				t.Fatalf("heapCost %d after a record, want %d as for the entry of separate objects", got, want)
			}
		})
	}
}

// TestFusedCostKeepsBufferAfterSecondStrategy: when a second strategy's counters are appended to a
// fused entry of two logs, the array inside the entry stays allocated: heapCost counts it on top of
// what the same entry made of separate objects holds (whose old slice is garbage).
func TestFusedCostKeepsBufferAfterSecondStrategy(t *testing.T) {
	minute := strategy.Rule{Limit: 60, Window: time.Minute}
	day := strategy.Rule{Limit: 5000, Window: 24 * time.Hour}
	base, other := mustStrategy(t, minute, day), mustStrategy(t, strategy.Rule{Limit: 10, Window: time.Second})
	fusedE, plain := newEntry("k", 1, base), &entry{key: "k", hash: 1}
	plain.countersFor(base)
	for _, e := range []*entry{fusedE, plain} {
		base.Record(e.countersFor(base), t0, 1) // every ring in use
		e.countersFor(other)
	}
	if len(fusedE.counters) != 3 || cap(fusedE.counters) == 2 {
		t.Fatalf("%d counters of capacity %d, want 3 in a new slice", len(fusedE.counters), cap(fusedE.counters))
	}
	if got, want := fusedE.heapCost(), plain.heapCost()+2*counterSlot; got != want {
		t.Fatalf("heapCost %d, want %d (separate objects' %d + the 32 bytes left in the entry)", got, want, plain.heapCost())
	}
}

// TestRealClockDatesInLockOrder: on the real clock an operation reads the clock before it takes
// the key's lock; it must still be dated no earlier than what the key saw by the time it got
// the lock, or a record that waited would count from an instant before an earlier holder's and
// free its slot early. The test holds the key's lock while a Record waits for it, records
// itself 20 ms later, and checks that the waiting record counts until that later instant + W.
// W is a minute, so that no stall of the waiting goroutine on a loaded machine (it may read the
// clock late, after the test's own record) dates its record past later + W.
func TestRealClockDatesInLockOrder(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, MemoryConfig{Clock: clock.Real()})
	// Buckets of 1 ms, so that two records 20 ms apart are in buckets of their own.
	s := mustStrategy(t, strategy.Rule{Limit: 100, Window: time.Minute, Granularity: time.Millisecond})
	if err := m.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	e, _ := m.lookup(ctx, "k")
	e.mu.Lock()
	done := make(chan error)
	go func() { done <- m.Record(ctx, s, "k", 1) }()
	time.Sleep(20 * time.Millisecond) // the Record has read the clock and waits for the lock
	later := m.applyOp(e, s, &op{write: true, n: 1, kind: opRecord}, nil)
	e.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Just before later + W both later records count (the first one, older, has gone).
	at := later.Add(time.Minute - time.Millisecond)
	if got := e.counters[0].Used(at); got != 2 {
		t.Fatalf("used %d at later+W−1ms, want 2: the record that waited for the lock is dated before the instant the key had seen", got)
	}
}

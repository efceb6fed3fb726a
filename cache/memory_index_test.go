package cache

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// indexEntry makes an entry the way admit does, for the index alone.
func indexEntry(m *Memory, key string) *entry { return &entry{key: key, hash: m.keyHash(key)} }

// TestIndexFindsOnlyItsKeyUnderConcurrentWrites: goroutines put, find and delete their own keys in
// one shard's index at once (so that it grows, fills with tombstones, rebuilds and shrinks under
// them), while readers look up every key: a lookup returns nil or the entry of the key asked, never
// another key's, and at the end the index holds exactly the entries not deleted.
func TestIndexFindsOnlyItsKeyUnderConcurrentWrites(t *testing.T) {
	m := newMemory(t, MemoryConfig{})
	var ix index
	const writers, perWriter = 8, 2000
	keys := make([][]*entry, writers)
	for w := range keys {
		for i := range perWriter {
			keys[w] = append(keys[w], indexEntry(m, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i)))
		}
	}
	var stop atomic.Bool
	var wrong atomic.Int64
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Go(func() {
			for i := r; !stop.Load(); i++ {
				e := keys[i%writers][i%perWriter]
				if got := ix.find(e.hash, e.key); got != nil && got.key != e.key {
					wrong.Add(1)
				}
			}
		})
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for round := range 3 {
				for _, e := range keys[w] {
					e.mu.Lock()
					ix.put(e)
					e.mu.Unlock()
					if got := ix.find(e.hash, e.key); got != e {
						t.Errorf("%s just put: found %p, want %p", e.key, got, e)
						return
					}
				}
				for i, e := range keys[w] {
					if round < 2 || i%2 == 0 { // the last round keeps the odd ones
						e.mu.Lock()
						ix.del(e)
						e.mu.Unlock()
						if got := ix.find(e.hash, e.key); got != nil {
							t.Errorf("%s just deleted: still found", e.key)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	readers.Wait()
	if n := wrong.Load(); n != 0 {
		t.Fatalf("%d lookups returned another key's entry", n)
	}
	held := map[*entry]bool{}
	for _, e := range ix.entries() {
		held[e] = true
	}
	if len(held) != writers*perWriter/2 || ix.live != len(held) {
		t.Fatalf("index holds %d entries (live %d), want %d", len(held), ix.live, writers*perWriter/2)
	}
	for w := range keys {
		for i, e := range keys[w] {
			if held[e] != (i%2 == 1) {
				t.Fatalf("%s: held %v", e.key, held[e])
			}
		}
	}
	// A flood that has passed leaves a small table: 1000 entries in at most 8 slots each.
	if size := ix.bytes() / 8; size > 8*len(held) {
		t.Errorf("%d slots for %d entries after the deletes: the table did not shrink", size, len(held))
	}
}

// TestIndexGrowthKeepsHeldKeysFound: keys that stay in the index are found by every lookup while
// another goroutine grows the table (and shrinks it again) with other keys: a reader on a
// table being replaced still finds what it held.
func TestIndexGrowthKeepsHeldKeysFound(t *testing.T) {
	m := newMemory(t, MemoryConfig{})
	var ix index
	var stay []*entry
	for i := range 16 {
		e := indexEntry(m, "stay-"+strconv.Itoa(i))
		e.mu.Lock()
		ix.put(e)
		e.mu.Unlock()
		stay = append(stay, e)
	}
	var stop atomic.Bool
	var missed atomic.Int64
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			for i := r; !stop.Load(); i++ {
				e := stay[i%len(stay)]
				if ix.find(e.hash, e.key) != e {
					missed.Add(1)
				}
			}
		})
	}
	for round := range 5 {
		var more []*entry
		for i := range 5000 {
			e := indexEntry(m, "grow-"+strconv.Itoa(round)+"-"+strconv.Itoa(i))
			e.mu.Lock()
			ix.put(e)
			e.mu.Unlock()
			more = append(more, e)
		}
		for _, e := range more {
			e.mu.Lock()
			ix.del(e)
			e.mu.Unlock()
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := missed.Load(); n != 0 {
		t.Fatalf("%d lookups of keys held throughout missed while the table grew", n)
	}
}

// checkIndex asserts the index's invariant on a quiet store: every entry of either tier is
// indexed, and every entry indexed is held (not evicted) in exactly one tier.
func checkIndex(t *testing.T, m *Memory) {
	t.Helper()
	m.life.Lock() // no janitor round meanwhile
	defer m.life.Unlock()
	indexed := map[*entry]bool{}
	for i := range m.shard {
		for _, e := range m.shard[i].ix.entries() {
			if indexed[e] {
				t.Errorf("%s indexed twice", e.key)
			}
			indexed[e] = true
			e.mu.Lock()
			if e.evicted || e.pinned == e.listed {
				t.Errorf("%s indexed: evicted %v pinned %v listed %v", e.key, e.evicted, e.pinned, e.listed)
			}
			e.mu.Unlock()
			if got, ok := m.lookup(context.Background(), e.key); !ok || got != e {
				t.Errorf("%s indexed but not found", e.key)
			}
		}
	}
	held := 0
	for i := range m.shard {
		for _, e := range m.shard[i].sample(-1) {
			held++
			if !indexed[e] {
				t.Errorf("pinned %s not indexed", e.key)
			}
		}
	}
	m.listMu.Lock()
	for v := m.head; v != nil; v = v.next {
		held++
		if !indexed[v] {
			t.Errorf("%s in ristretto not indexed", v.key)
		}
	}
	m.listMu.Unlock()
	if held != len(indexed) {
		t.Errorf("%d entries held in the tiers, %d indexed", held, len(indexed))
	}
}

// TestIndexMatchesTiersUnderEvictions: 16 goroutines reserve, record, peek and release on keys of a
// store too small for them (so that ristretto evicts, admissions drop the oldest, keys are pinned
// and unpinned) while the janitor sweeps, under -race; no operation fails, and at the end the index
// holds exactly the entries of both tiers.
func TestIndexMatchesTiersUnderEvictions(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{MaxCost: 128 << 10, MaxKeys: 500, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	s := mustStrategy(t, strategy.Rule{Limit: 20, Window: time.Minute})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 1500 {
				k := "k" + strconv.Itoa((g*7919+i*31)%600)
				var err error
				switch i % 4 {
				case 0:
					r, e := m.Reserve(ctx, s, k, 1)
					if err = e; err == nil && r.Allowed && i%8 == 0 {
						err = m.Release(ctx, s, k, r.At, 1)
					}
				case 1, 2:
					err = m.Record(ctx, s, k, 1+i%3)
				case 3:
					_, err = m.Peek(ctx, s, k, 1)
				}
				if err != nil && !errors.Is(err, ErrFull) {
					t.Error(err)
					return
				}
				if g == 0 && i%200 == 199 {
					clk.Advance(10 * time.Second)
					m.sweepTick()
				}
			}
		})
	}
	wg.Wait()
	checkIndex(t, m)
	st := m.Stats()
	t.Logf("%d pinned, %d in ristretto, %+v", m.pinnedN.Load(), m.listN.Load(), st)
	if st.EvictedLive == 0 {
		t.Error("no eviction: the store was meant to be too small")
	}
}

// TestDroppedKeyReadmittedAfresh: a key whose state is dropped leaves the index; its next operation
// admits a new entry, indexed in its place, whose counts start afresh, and the old entry is never
// updated again.
func TestDroppedKeyReadmittedAfresh(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	if err := m.Record(ctx, s, "k", 5); err != nil {
		t.Fatal(err)
	}
	old, ok := m.lookup(ctx, "k")
	if !ok {
		t.Fatal("k not indexed")
	}
	sh := m.shardOf(old)
	sh.mu.Lock()
	dropped := m.drop(old, false) // what a refused admission does to the oldest key
	sh.mu.Unlock()
	if !dropped {
		t.Fatal("k not dropped")
	}
	if _, ok := m.lookup(ctx, "k"); ok {
		t.Fatal("dropped k still indexed")
	}
	if err := m.Record(ctx, s, "k", 2); err != nil {
		t.Fatal(err)
	}
	e, ok := m.lookup(ctx, "k")
	if !ok || e == old {
		t.Fatalf("after the new record: indexed %p (old %p), %v; want a new entry", e, old, ok)
	}
	if u := used(t, m, s, "k"); u[0] != 2 {
		t.Fatalf("used %d after re-admission, want 2 (the dropped state is gone)", u[0])
	}
	old.mu.Lock()
	oldUsed := old.counters[0].Used(clk.Now())
	old.mu.Unlock()
	if oldUsed != 5 {
		t.Fatalf("the dropped entry was updated: used %d, want 5", oldUsed)
	}
	checkIndex(t, m)
}

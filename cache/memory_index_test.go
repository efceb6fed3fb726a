package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// indexEntry makes an entry the way admit does, for the index alone.
func indexEntry(m *Memory, key string) *entry { return &entry{key: key, hash: m.keyHash(key)} }

// TestIndexConcurrent: goroutines put, find and delete their own keys in one shard's index at
// once (so that it grows, fills with tombstones, rebuilds and shrinks under them), while
// readers look up every key: a lookup returns nil or the entry of the key asked, never another
// key's, and at the end the index holds exactly the entries not deleted.
func TestIndexConcurrent(t *testing.T) {
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

// TestIndexGrowthUnderReads: keys that stay in the index are found by every lookup while
// another goroutine grows the table (and shrinks it again) with other keys: a reader on a
// table being replaced still finds what it held.
func TestIndexGrowthUnderReads(t *testing.T) {
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

// TestIndexUnderEvictions: 16 goroutines reserve, record, peek and release on keys of a store
// too small for them (so that ristretto evicts, admissions drop the oldest, keys are pinned and
// unpinned) while the janitor sweeps, under -race; no operation fails, and at the end the
// index holds exactly the entries of both tiers.
func TestIndexUnderEvictions(t *testing.T) {
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

// TestIndexReadmitted: a key whose state is dropped leaves the index; its next operation admits
// a new entry, indexed in its place, whose counts start afresh, and the old entry is never
// updated again.
func TestIndexReadmitted(t *testing.T) {
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

// TestCloseDuringFastPath: goroutines hammer keys the store already holds (operations that
// take neither life nor a shard's lock) while Close runs: nothing panics (ristretto's channels
// are closed), every error is ErrClosed, and every operation that starts after Close returned
// gets ErrClosed.
func TestCloseDuringFastPath(t *testing.T) {
	s := mustStrategy(t, strategy.Rule{Limit: 1 << 20, Window: time.Minute})
	ctx := context.Background()
	for range 10 {
		m, err := NewMemory(MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			if err := m.Record(ctx, s, strconv.Itoa(i), 1); err != nil {
				t.Fatal(err)
			}
		}
		var closed atomic.Bool
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					after := closed.Load()
					k := strconv.Itoa((g + i) % 64)
					var err error
					if i%2 == 0 {
						_, err = m.Reserve(ctx, s, k, 1)
					} else {
						err = m.Record(ctx, s, k, 1)
					}
					if err != nil && !errors.Is(err, ErrClosed) {
						t.Error(err)
						return
					}
					if after {
						if err == nil {
							t.Error("an operation begun after Close returned succeeded")
						}
						return
					}
				}
			})
		}
		time.Sleep(2 * time.Millisecond)
		m.Close()
		closed.Store(true)
		wg.Wait()
	}
}

// TestNoAllocsOnHeldKey: Reserve and Record on a key the store holds allocate nothing.
func TestNoAllocsOnHeldKey(t *testing.T) {
	m := newMemory(t, MemoryConfig{Clock: clock.Real()})
	ctx := context.Background()
	for _, s := range []struct {
		name  string
		rules []strategy.Rule
	}{
		{"open", []strategy.Rule{{Limit: 1 << 30, Window: time.Minute}}},
		{"60per1m", []strategy.Rule{{Limit: 60, Window: time.Minute}}},
		{"xero", []strategy.Rule{{Limit: 60, Window: time.Minute, Margin: time.Second}, {Limit: 5000, Window: 24 * time.Hour}}},
	} {
		st := mustStrategy(t, s.rules...)
		key := "tenant-" + s.name
		for range 200 { // the logs reach their size, the key its tier
			if err := m.Record(ctx, st, key, 1); err != nil {
				t.Fatal(err)
			}
		}
		if n := testing.AllocsPerRun(1000, func() {
			if _, err := m.Reserve(ctx, st, key, 1); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Reserve allocates %v times per call, want 0", s.name, n)
		}
		if n := testing.AllocsPerRun(1000, func() {
			if err := m.Record(ctx, st, key, 1); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Record allocates %v times per call, want 0", s.name, n)
		}
	}
}

// TestFloodSparesKeysInUse: keys in use below their limits (so in ristretto, not pinned) are
// found through the index, and ristretto hears of them only by the sampled Gets. A flood of new
// keys, each used once, must evict the flood's keys and not those in use: ristretto's TinyLFU,
// fed by the sampled Gets, refuses the new keys in favour of the frequent ones, and the victim
// the store then drops itself (the oldest on its list) is never a key in use, which the
// sampled operations move to the list's tail. (Before the index, every operation was a Get but
// the list stayed in admission order: this flood evicted each key in use about 8 times.)
func TestFloodSparesKeysInUse(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race, sync.Pool drops ristretto's Get buffers at random: TinyLFU hears of no key (before the index too)")
	}
	clk := clock.NewManual(t0)
	var mu sync.Mutex
	evicted := map[string]int{}
	m := newMemory(t, MemoryConfig{MaxCost: 256 << 10, MaxKeys: 500, Clock: clk, Logger: slog.New(slog.DiscardHandler),
		OnEvictLive: func(k string) {
			mu.Lock()
			evicted[k[:strings.IndexByte(k, '-')]]++
			mu.Unlock()
		}})
	s := mustStrategy(t, strategy.Rule{Limit: 1 << 20, Window: time.Minute})
	ctx := context.Background()
	const hot, flood = 100, 10_000
	for round := range flood / 50 {
		for range 20 { // each key in use 20 times for every 50 new keys
			for h := range hot {
				if _, err := m.Reserve(ctx, s, "hot-"+strconv.Itoa(h), 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		// ristretto's policy goroutine takes the reads in batches and drops those it is not
		// ready for: yield, as a program serving requests does, so that it runs. (A loop that
		// never yields, on a loaded machine, starves it; the sampled reads, a sixteenth of
		// the operations, then leave the keys in use without a frequency now and then.)
		runtime.Gosched()
		for i := range 50 {
			if err := m.Record(ctx, s, "flood-"+strconv.Itoa(round*50+i), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	mu.Lock()
	hotShare, floodShare := float64(evicted["hot"])/hot, float64(evicted["flood"])/flood
	mu.Unlock()
	t.Logf("live evictions: %d of %d hot keys, %d of %d flood keys", evicted["hot"], hot, evicted["flood"], flood)
	if floodShare < 0.5 {
		t.Fatalf("only %.2f of the flood's keys were evicted: the store was meant to be too small", floodShare)
	}
	if hotShare > floodShare/4 {
		t.Errorf("hot keys were evicted %.2f times per key, flood keys %.2f: want the keys in use spared (at most a quarter of the flood's rate)", hotShare, floodShare)
	}
}

// TestRepeatedRefusalsExact: a key at its limit answers repeated Reserves of 1 without its
// counters (entry.refusing). Random traffic on such keys, with the clock moving forward and
// now and then back (within and beyond StepTolerance), and with records (over the limit too),
// releases, peeks and a second strategy mixed in, gets exactly the answers the strategy gives
// on plain counters (with Rebase before each operation, as the store does). (No Sync: after a
// write the store reads the counters once more, to pin a key at its limit, which moves their
// time to now; the reference does not model that, which only a Sync followed by a step back
// would show.)
func TestRepeatedRefusalsExact(t *testing.T) {
	minute := strategy.Rule{Limit: 5, Window: 10 * time.Second}
	strategies := [][]*engineStrategy{
		{mustStrategy(t, minute)},
		{mustStrategy(t, minute, strategy.Rule{Limit: 12, Window: time.Minute})},
		{mustStrategy(t, minute), mustStrategy(t, strategy.Rule{Limit: 12, Window: time.Minute})},
	}
	skippedSeen := 0
	for si, ss := range strategies {
		for seed := range 40 {
			rng := rand.New(rand.NewPCG(uint64(si), uint64(seed)))
			clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
			m := newMemory(t, MemoryConfig{Clock: clk})
			ctx := context.Background()
			refCounters := map[*engineStrategy][]engine.Counter{}
			var ids []string
			var all []engine.Counter
			up := &engine.Upstream{}
			ref := func(s *engineStrategy) []engine.Counter {
				// The store's counters per ID, shared between strategies, as the store keeps them.
				if cs, ok := refCounters[s]; ok {
					return cs
				}
				var cs []engine.Counter
				for j := range s.Slots() {
					var c engine.Counter
					for i, id := range ids {
						if id == s.CounterID(j) {
							c = all[i]
						}
					}
					if c == nil {
						c = s.NewCounter(j)
						ids, all = append(ids, s.CounterID(j)), append(all, c)
					}
					cs = append(cs, c)
				}
				refCounters[s] = cs
				return cs
			}
			// The key is held from the start: a store answers a Peek of a key it does not hold
			// from empty counters it then drops, which the reference's counters would not do.
			if err := m.Record(ctx, ss[0], "k", 1); err != nil {
				t.Fatal(err)
			}
			ss[0].Record(ref(ss[0]), clk.Now(), 1)
			var lastAt []time.Time
			for step := range 400 {
				switch r := rng.IntN(20); {
				case r < 12:
					clk.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
				case r < 14: // stepped back, within StepTolerance or beyond it
					clk.Step(-time.Duration(rng.IntN(1500)) * time.Millisecond)
				}
				s := ss[rng.IntN(len(ss))]
				cs := ref(s)
				now := clk.Now()
				engine.Rebase(all, up, now)
				where := fmt.Sprintf("strategies %d seed %d step %d", si, seed, step)

				switch r := rng.IntN(20); {
				case r < 14:
					got, err := m.Reserve(ctx, s, "k", 1)
					want, _ := s.ReserveWith(cs, up, now, 1)
					if err != nil || got != want {
						t.Fatalf("%s: Reserve = %+v, %v; want %+v", where, got, err, want)
					}
					if got.Allowed {
						lastAt = append(lastAt, got.At)
					}
				case r < 16: // monitoring: a key over its limit waits for several buckets
					n := 1 + rng.IntN(3)
					if err := m.Record(ctx, s, "k", n); err != nil {
						t.Fatal(err)
					}
					s.Record(cs, now, n)
				case r < 17 && len(lastAt) > 0:
					at := lastAt[rng.IntN(len(lastAt))]
					if err := m.Release(ctx, s, "k", at, 1); err != nil {
						t.Fatal(err)
					}
					s.Release(cs, at, 1)
				default:
					got, err := m.Peek(ctx, s, "k", 1)
					want, _ := s.PeekWith(cs, up, now, 1)
					if err != nil || !reflect.DeepEqual(got, want) {
						t.Fatalf("%s: Peek = %+v, %v; want %+v", where, got, err, want)
					}
				}
				if e, ok := m.lookup(ctx, "k"); ok {
					e.mu.Lock()
					if e.flags&skipped != 0 {
						skippedSeen++
					}
					e.mu.Unlock()
				}
			}
		}
	}
	if skippedSeen == 0 {
		t.Fatal("no refusal was answered without the counters: the test does not reach the shortcut")
	}
	t.Logf("%d operations left refusals answered without the counters", skippedSeen)
}

type engineStrategy = engine.Strategy

// TestRepeatedRefusalThenClockBack: refusals answered without the counters still move the
// key's time as a full answer would: after one at 10.5 s (which the bucket recorded at 0 s no
// longer counts at), a Peek with the clock stepped back to 9.8 s (within StepTolerance) is
// answered at 10.5 s, without that bucket.
func TestRepeatedRefusalThenClockBack(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: 10 * time.Second})
	ctx := context.Background()
	for i, n := range []int{2, 2, 3} { // 7 over a limit of 5: the key waits for two buckets
		if i > 0 {
			clk.Advance(time.Second)
		}
		if err := m.Record(ctx, s, "k", n); err != nil {
			t.Fatal(err)
		}
	}
	for _, at := range []time.Duration{3 * time.Second, 10500 * time.Millisecond} {
		clk.Advance(at - clk.Now().Sub(t0))
		res, err := m.Reserve(ctx, s, "k", 1)
		if want := 11*time.Second - at; err != nil || res.Allowed || res.Wait != want {
			t.Fatalf("Reserve at %v: %+v, %v; want refused with a wait of %v", at, res, err, want)
		}
	}
	e, _ := m.lookup(ctx, "k")
	e.mu.Lock()
	wasSkipped := e.flags&skipped != 0
	e.mu.Unlock()
	if !wasSkipped {
		t.Fatal("the second refusal was answered from the counters: the test does not reach the shortcut")
	}
	clk.Step(-700 * time.Millisecond) // to 9.8 s
	if u := used(t, m, s, "k"); u[0] != 5 {
		t.Fatalf("used %d after the clock stepped back to 9.8 s, want 5 (answered at 10.5 s, the latest instant the key has seen)", u[0])
	}
}

// TestRoomPinsAtLimit: the entry's room (entry.room) spares the check for the limit after a
// record while room is left; the key must still move to the pinned tier on the very record that
// leaves it at its limit, and back once its window frees a slot. Records of random sizes at
// random instants, with peeks between: after each record the key is pinned exactly when one
// more request would wait.
func TestRoomPinsAtLimit(t *testing.T) {
	for _, limit := range []int{3, 40, 300} { // room below, near and above its 255 cap
		clk := clock.NewManual(t0)
		m := newMemory(t, MemoryConfig{Clock: clk})
		s := mustStrategy(t, strategy.Rule{Limit: limit, Window: 10 * time.Second})
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(uint64(limit), 1))
		pins := 0
		for step := range 2000 {
			clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
			if rng.IntN(4) == 0 {
				if _, err := m.Peek(ctx, s, "k", 1); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := m.Record(ctx, s, "k", 1+rng.IntN(max(1, limit/15))); err != nil {
				t.Fatal(err)
			}
			e, _ := m.lookup(ctx, "k")
			e.mu.Lock()
			full := s.Wait(e.counters, clk.Now(), 1) > 0
			pinned := e.pinned
			e.mu.Unlock()
			if pinned != full {
				t.Fatalf("limit %d step %d: pinned %v, but one more request waits: %v", limit, step, pinned, full)
			}
			if pinned {
				pins++
			}
		}
		if pins == 0 {
			t.Fatalf("limit %d: the key never reached its limit: the test does not test the pinning", limit)
		}
	}
}

package cache

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

var fullFlood = flag.Bool("flood", false, "run TestFlood at full size: 1 000 000 keys against the default 64 MiB (about a minute)")

// heapInUse returns the live heap in bytes, after two collections.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// charged returns how many entries the store holds in either tier and the sum of their costs.
func (m *Memory) charged() (n, cost int64) {
	m.listMu.Lock()
	for v := m.head; v != nil; v = v.next {
		n++
		cost += int64(v.cost)
	}
	m.listMu.Unlock()
	for i := range m.shard {
		for _, v := range m.shard[i].sample(-1) {
			n++
			cost += int64(v.cost)
		}
	}
	return n, cost
}

// TestCostMatchesHeap: the cost the store charges per key is within ±20 % of the heap a key
// really holds, measured with runtime.ReadMemStats, for a one-rule and a two-rule strategy.
func TestCostMatchesHeap(t *testing.T) {
	const keys = 10_000
	for _, s := range []*engine.Strategy{
		mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute}),
		mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute}),
	} {
		t.Run(strconv.Itoa(s.NumRules())+" rules", func(t *testing.T) {
			m := newMemory(t, MemoryConfig{MaxCost: 1 << 30, MaxKeys: keys})
			names := make([]string, keys) // made before the baseline: the caller's strings are not the store's
			for i := range names {
				names[i] = "tenant-" + strconv.Itoa(1_000_000+i)
			}
			before := heapInUse()
			for i, k := range names {
				if err := m.Record(context.Background(), s, k, 1+i%3); err != nil {
					t.Fatal(err)
				}
			}
			heap := float64(heapInUse()-before) / keys
			n, cost := m.charged()
			if n != keys {
				t.Fatalf("%d keys held, want %d", n, keys)
			}
			perKey := float64(cost) / keys
			t.Logf("heap %.0f bytes per key, charged %.0f", heap, perKey)
			if perKey < 0.8*heap || perKey > 1.2*heap {
				t.Errorf("charged %.0f bytes per key, the heap holds %.0f: want within ±20 %%", perKey, heap)
			}
			runtime.KeepAlive(names)
		})
	}
}

// floodResult is what TestFlood measured.
type floodResult struct {
	peak, after     int64 // heap above the empty store's at the flood's peak, and once every key expired
	fixed           int64 // heap the empty store holds (ristretto's sketch, sized by MaxKeys)
	evicted, held   int64 // flood keys evicted live, and held at the end of the flood
	perKey, charged float64
}

// flood writes keys distinct keys, one request each, into a store of maxCost while hot keys
// sit at their limit, and checks the store's promises on the way.
func flood(t *testing.T, maxCost, maxKeys int64, keys, hot int) floodResult {
	t.Helper()
	var r floodResult
	ctx := context.Background()
	clk := clock.NewManual(t0)
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	var mu sync.Mutex
	var evicted int64
	var hotEvicted []string // kept small: the test's own memory is in the heap measured
	base := heapInUse()
	m := newMemory(t, MemoryConfig{MaxCost: maxCost, MaxKeys: maxKeys, Clock: clk, Logger: slog.New(slog.DiscardHandler), OnEvictLive: func(k string) {
		mu.Lock()
		evicted++
		if strings.HasPrefix(k, "hot-") {
			hotEvicted = append(hotEvicted, k)
		}
		mu.Unlock()
	}})
	empty := heapInUse()
	r.fixed = empty - base
	hotKey := func(i int) string { return "hot-" + strconv.Itoa(i) }
	for i := range hot {
		if err := m.Record(ctx, s, hotKey(i), 60); err != nil {
			t.Fatal(err)
		}
	}
	sample := max(keys/16, 1)
	for i := range keys {
		if err := m.Record(ctx, s, "flood-"+strconv.Itoa(i), 1); err != nil {
			// Evictable keys are always there to make room: no key may be refused.
			t.Fatalf("flood key %d: %v", i, err)
		}
		if i%sample == sample-1 {
			r.peak = max(r.peak, heapInUse()-empty)
		}
	}
	held, cost := m.charged()
	r.held = held - int64(hot)
	r.perKey = float64(heapInUse()-empty) / float64(held)
	r.charged = float64(cost) / float64(held)
	if r.charged < 0.8*r.perKey || r.charged > 1.2*r.perKey {
		t.Errorf("after the flood: charged %.0f bytes per key, the heap holds %.0f per key: want within ±20 %%", r.charged, r.perKey)
	}
	mu.Lock()
	r.evicted = evicted
	if len(hotEvicted) > 0 {
		t.Errorf("%d keys at their limit were evicted while flood keys could go: %q", len(hotEvicted), hotEvicted[:min(len(hotEvicted), 5)])
	}
	mu.Unlock()
	for i := range hot {
		res, err := m.Reserve(ctx, s, hotKey(i), 1)
		if err != nil || res.Allowed || res.Wait != time.Minute {
			t.Fatalf("%s after the flood: %+v, %v; want refused with a wait of 1m (its limit is used up)", hotKey(i), res, err)
		}
	}
	if st := m.Stats(); st.Rejected != 0 || st.EvictedLive != r.evicted || r.evicted+r.held != int64(keys) {
		t.Errorf("stats %+v, %d flood keys reported evicted, %d held: want none rejected and every key of %d held or reported",
			st, r.evicted, r.held, keys)
	}
	if lim := 256<<10 + 64*maxKeys; r.fixed > lim {
		t.Errorf("the empty store holds %d bytes, want at most 256 KiB (ristretto's set buffer) and 64 per MaxKeys, %d", r.fixed, lim)
	}
	if lim := maxCost + maxCost/5; r.peak > lim {
		t.Errorf("heap peaked %d bytes above the empty store's, want at most 1.2 × MaxCost = %d", r.peak, lim)
	}
	clk.Advance(2 * time.Minute) // every key's window has passed
	m.sweepAll()
	if n, _ := m.charged(); n != 0 {
		t.Errorf("%d keys held after every key expired, want 0", n)
	}
	r.after = heapInUse() - empty
	if lim := r.peak / 20; r.after > lim {
		t.Errorf("after every key expired the heap is %d bytes above the empty store's (peak %d): want at most 5 %% of the peak, %d",
			r.after, r.peak, lim)
	}
	if st := m.Stats(); st.EvictedLive != r.evicted {
		t.Errorf("expired keys reported as live evictions: %+v", st)
	}
	return r
}

// TestFlood: a flood of distinct keys, 7× what a 2 MiB store holds, against keys at their
// limit. The heap stays within 1.2 × MaxCost of the empty store's (which holds ristretto's
// set buffer and its sketch, sized by MaxKeys: at most 256 KiB and 64 bytes per MaxKeys), no key is refused, the keys at
// their limit are never evicted and stay refused, every other key is held or reported, and
// once every key has expired the heap is back to the empty store's. With -flood: 1 000 000
// keys against the default MemoryConfig.
func TestFlood(t *testing.T) {
	maxCost, maxKeys, keys, hot := int64(2<<20), int64(3_125), 20_000, 250
	if *fullFlood {
		maxCost, maxKeys, keys, hot = DefaultMaxCost, DefaultMaxKeys, 1_000_000, 10_000
	}
	begin := time.Now()
	r := flood(t, maxCost, maxKeys, keys, hot)
	t.Logf("%d keys into MaxCost %d MiB, MaxKeys %d (%d hot keys at their limit) in %v: heap peak %.3f × MaxCost above the empty store (%.2f MiB; %.3f × with it), %.0f bytes per key held charged %.0f, %d flood keys held, %d evicted live, 0 refused; %.2f MiB above the empty store once all expired",
		keys, maxCost>>20, maxKeys, hot, time.Since(begin).Round(time.Millisecond), float64(r.peak)/float64(maxCost), float64(r.fixed)/(1<<20),
		float64(r.peak+r.fixed)/float64(maxCost), r.perKey, r.charged, r.held, r.evicted, float64(r.after)/(1<<20))
}

// TestFullOnlyWhenAllPinned: when every byte is held by keys at their limits, a new key gets
// ErrFull (and nothing is evicted); once their windows pass, new keys are admitted again.
func TestFullOnlyWhenAllPinned(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{MaxCost: 64 << 10, MaxKeys: 1000, Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 2, Window: time.Minute})
	ctx := context.Background()
	full := -1
	for i := range 1000 {
		if err := m.Record(ctx, s, "k"+strconv.Itoa(i), 2); errors.Is(err, ErrFull) {
			full = i
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if full < 0 {
		t.Fatal("1000 keys at their limits fitted in 64 KiB")
	}
	n, cost := m.charged()
	if n != int64(full) || m.pinnedN.Load() != n || cost > 64<<10 {
		t.Fatalf("ErrFull at key %d with %d keys held (%d pinned, %d bytes)", full, n, m.pinnedN.Load(), cost)
	}
	if st := m.Stats(); st.EvictedLive != 0 || st.Rejected != 1 {
		t.Fatalf("stats %+v, want no live eviction and one rejection", st)
	}
	for i := range full {
		if u := used(t, m, s, "k"+strconv.Itoa(i)); u[0] != 2 {
			t.Fatalf("k%d: used %d, want 2", i, u[0])
		}
	}
	clk.Advance(time.Minute)
	if err := m.Record(ctx, s, "late", 1); err != nil {
		t.Fatalf("after every pinned key's window passed: %v", err)
	}
}

// TestPinnedKeyLeavesWhenBelowLimit: a key that reaches its limit moves to the pinned tier and
// back to ristretto on its first operation after its window has passed; a pause pins too.
func TestPinnedKeyLeavesWhenBelowLimit(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 3, Window: time.Minute})
	ctx := context.Background()
	tiers := func() (pinned, listed int64) { return m.pinnedN.Load(), m.listN.Load() }
	if err := m.Record(ctx, s, "k", 2); err != nil {
		t.Fatal(err)
	}
	if p, l := tiers(); p != 0 || l != 1 {
		t.Fatalf("below its limit: %d pinned, %d listed; want 0, 1", p, l)
	}
	if res, err := m.Reserve(ctx, s, "k", 1); err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	if p, l := tiers(); p != 1 || l != 0 || m.pinnedCost.Load() == 0 {
		t.Fatalf("at its limit: %d pinned (%d bytes), %d listed; want 1, 0", p, m.pinnedCost.Load(), l)
	}
	if u := used(t, m, s, "k"); u[0] != 3 {
		t.Fatalf("pinned key: used %d, want 3", u[0])
	}
	clk.Advance(time.Minute)
	if err := m.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if p, l := tiers(); p != 0 || l != 1 || m.pinnedCost.Load() != 0 {
		t.Fatalf("after its window: %d pinned (%d bytes), %d listed; want 0, 1", p, m.pinnedCost.Load(), l)
	}
	if u := used(t, m, s, "k"); u[0] != 1 {
		t.Fatalf("back in ristretto: used %d, want 1", u[0])
	}
	if err := m.Sync(ctx, s, "k", engine.Update{Pause: time.Second}); err != nil {
		t.Fatal(err)
	}
	if p, _ := tiers(); p != 1 {
		t.Fatalf("paused: %d pinned, want 1", p)
	}
}

// TestTiersUnderContention: goroutines drive their own keys to their limits (pinning them),
// release some requests (so that some pinned keys are below their limits) and flood new keys
// into a small store, while the janitor's sweep runs. No operation fails, no key is evicted
// after it was refused for being at its limit, and at the end each tier's count and cost
// match what it holds.
func TestTiersUnderContention(t *testing.T) {
	var refused sync.Map // keys refused at their limit; Release never follows a refusal
	var violations atomic.Int64
	m := newMemory(t, MemoryConfig{MaxCost: 256 << 10, MaxKeys: 1000, Logger: slog.New(slog.DiscardHandler),
		OnEvictLive: func(k string) {
			if _, ok := refused.Load(k); ok {
				violations.Add(1)
			}
		}})
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: time.Minute})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 400 {
				hot := "hot-" + strconv.Itoa(g) + "-" + strconv.Itoa(i%10)
				res, err := m.Reserve(ctx, s, hot, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					refused.Store(hot, true)
				} else if i%7 == 0 {
					if _, ok := refused.Load(hot); !ok {
						if err := m.Release(ctx, s, hot, res.At, 1); err != nil {
							t.Error(err)
							return
						}
					}
				}
				if err := m.Record(ctx, s, "flood-"+strconv.Itoa(g)+"-"+strconv.Itoa(i), 1); err != nil {
					t.Error(err)
					return
				}
				if i%100 == 99 {
					m.sweepTick()
				}
			}
		})
	}
	wg.Wait()
	if n := violations.Load(); n != 0 {
		t.Errorf("%d keys at their limit evicted while flood keys could go", n)
	}
	n := 0
	refused.Range(func(k, _ any) bool {
		n++
		if res, err := m.Reserve(ctx, s, k.(string), 1); err != nil || res.Allowed {
			t.Errorf("%s, refused at its limit, now: %+v, %v", k, res, err)
		}
		return true
	})
	if n == 0 {
		t.Fatal("no key reached its limit")
	}
	m.life.Lock() // no janitor round meanwhile
	defer m.life.Unlock()
	var pinnedN, pinnedCost, listN int64
	check := func(v *entry, pinned bool) {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.pinned != pinned || v.listed == pinned || v.evicted || v.pinning {
			t.Errorf("%s (pinned tier %v): pinned %v listed %v evicted %v pinning %v", v.key, pinned, v.pinned, v.listed, v.evicted, v.pinning)
		}
		if pinned {
			pinnedN++
			pinnedCost += int64(v.cost)
		}
	}
	for i := range m.shard {
		for _, v := range m.shard[i].sample(-1) {
			check(v, true)
		}
	}
	m.listMu.Lock()
	var listed []*entry
	for v := m.head; v != nil; v = v.next {
		listed = append(listed, v)
	}
	m.listMu.Unlock()
	for _, v := range listed {
		listN++
		check(v, false)
	}
	if pinnedN != m.pinnedN.Load() || pinnedCost != m.pinnedCost.Load() || listN != m.listN.Load() {
		t.Errorf("pinned %d (%d bytes), listed %d; counters say %d (%d bytes), %d", pinnedN, pinnedCost, listN,
			m.pinnedN.Load(), m.pinnedCost.Load(), m.listN.Load())
	}
	if st := m.Stats(); st.Rejected != 0 {
		t.Errorf("stats %+v: want no rejection", st)
	}
	t.Logf("%d keys refused at their limit, %d pinned, %d in ristretto, %+v", n, pinnedN, listN, m.Stats())
}

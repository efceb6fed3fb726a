package cache

import (
	"context"
	"flag"
	"log/slog"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

var fullFlood = flag.Bool("flood", false, "run TestFloodStaysWithinMaxCost at full size: 1 000 000 keys against the default 64 MiB (about a minute)")

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

// floodResult is what TestFloodStaysWithinMaxCost measured.
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

// TestFloodStaysWithinMaxCost: a flood of distinct keys, 7× what a 2 MiB store holds, against keys
// at their limit. The heap stays within 1.2 × MaxCost of the empty store's (which holds ristretto's
// set buffer and its sketch, sized by MaxKeys: at most 256 KiB and 64 bytes per MaxKeys), no key is
// refused, the keys at their limit are never evicted and stay refused, every other key is held or
// reported, and once every key has expired the heap is back to the empty store's. With -flood: 1
// 000 000 keys against the default MemoryConfig.
func TestFloodStaysWithinMaxCost(t *testing.T) {
	maxCost, maxKeys, keys, hot := int64(2<<20), int64(3_125), 20_000, 250
	if *fullFlood {
		maxCost, maxKeys, keys, hot = defaultMaxCost, defaultMaxKeys, 1_000_000, 10_000
	}
	begin := time.Now()
	r := flood(t, maxCost, maxKeys, keys, hot)
	t.Logf("%d keys into MaxCost %d MiB, MaxKeys %d (%d hot keys at their limit) in %v: heap peak %.3f × MaxCost above the empty store (%.2f MiB; %.3f × with it), %.0f bytes per key held charged %.0f, %d flood keys held, %d evicted live, 0 refused; %.2f MiB above the empty store once all expired",
		keys, maxCost>>20, maxKeys, hot, time.Since(begin).Round(time.Millisecond), float64(r.peak)/float64(maxCost), float64(r.fixed)/(1<<20),
		float64(r.peak+r.fixed)/float64(maxCost), r.perKey, r.charged, r.held, r.evicted, float64(r.after)/(1<<20))
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
		// ristretto's policy goroutine takes the reads in batches and drops a batch when 3
		// wait already: let it take this round's (one or two batches of 64) before the next,
		// as a program serving requests leaves it time to. A mere yield was not enough on a
		// loaded machine, where the goroutine may not run for several rounds: the keys in use
		// were then left without a frequency, and evicted like the flood's.
		waitPolicy(t, m)
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

// waitPolicy waits until ristretto's policy goroutine has taken every batch of reads queued
// for it. ristretto offers no call for it (Cache.Wait waits for the writes only), so this reads
// the length of the policy's unexported channel.
func waitPolicy(t *testing.T, m *Memory) {
	t.Helper()
	ch := reflect.ValueOf(m.client).Elem().FieldByName("cachePolicy")
	if ch.Kind() == reflect.Pointer {
		ch = ch.Elem().FieldByName("itemsCh")
	}
	if ch.Kind() != reflect.Chan {
		t.Fatal("ristretto's Cache has no cachePolicy.itemsCh (a new ristretto?): update waitPolicy")
	}
	deadline := time.Now().Add(time.Minute)
	for ch.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("ristretto's policy goroutine took no batch of reads in a minute (%d waiting)", ch.Len())
		}
		runtime.Gosched()
	}
}

package cache

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// heapScenario is a traffic pattern that BenchmarkBytesPerKey plays to many keys on a manual
// clock: every key sends one request every period, all keys at the same instants, for span.
type heapScenario struct {
	name   string
	keys   int
	rules  []strategy.Rule
	period time.Duration
	span   time.Duration
	// limiters returns the x/time/rate limiters a program without this library would keep for
	// one key under the same rules (the first is the one in the sync.Map for one rule).
	limiters func() []*rate.Limiter
}

// xeroDay is the README's Xero rules (60 a minute with a 1 s margin, 5000 a day) with the day
// rule's granularity and margin as given (zero: the default granularity, a sixtieth of the
// day's window+margin when that is whole minutes; no margin).
func xeroDay(gran, margin time.Duration) []strategy.Rule {
	return []strategy.Rule{
		{Limit: 60, Window: time.Minute, Margin: time.Second},
		{Limit: 5000, Window: 24 * time.Hour, Granularity: gran, Margin: margin},
	}
}

func xeroLimiters() []*rate.Limiter {
	return []*rate.Limiter{
		rate.NewLimiter(rate.Every(time.Second), 60),
		rate.NewLimiter(rate.Every(24*time.Hour/5000), 5000),
	}
}

// heapScenarios: (a) a busy key under one 60/1m rule, 60 requests a minute for two minutes, so
// its log holds a full window (and the key, at its limit, sits in the pinned tier), beside a
// light one (6 a minute: it stays in ristretto); (b) a Xero tenant's steady day, 5000 requests 17.28 s apart, so
// the day rule holds a whole day of them, with the day rule in exact 1 s buckets (asked for:
// the default until issue 17), at the old Xero profile's 10 s (and 10 s margin), at 1 m, at
// W/60 (24 m), at the default (24 m for the day), and as the Xero profile has it now (a 1 min
// margin, the default 24m1s).
var heapScenarios = []heapScenario{
	{name: "busy-60per1m", keys: 2000, rules: []strategy.Rule{{Limit: 60, Window: time.Minute}},
		period: time.Second, span: 2 * time.Minute,
		limiters: func() []*rate.Limiter { return []*rate.Limiter{rate.NewLimiter(rate.Every(time.Second), 60)} }},
	{name: "light-60per1m", keys: 2000, rules: []strategy.Rule{{Limit: 60, Window: time.Minute}},
		period: 10 * time.Second, span: 2 * time.Minute,
		limiters: func() []*rate.Limiter { return []*rate.Limiter{rate.NewLimiter(rate.Every(time.Second), 60)} }},
	{name: "xero-day/gran=1s", keys: 100, rules: xeroDay(time.Second, 0), period: 24 * time.Hour / 5000, span: 24 * time.Hour, limiters: xeroLimiters},
	{name: "xero-day/gran=10s-profile", keys: 100, rules: xeroDay(10*time.Second, 10*time.Second), period: 24 * time.Hour / 5000, span: 24 * time.Hour, limiters: xeroLimiters},
	{name: "xero-day/gran=1m", keys: 100, rules: xeroDay(time.Minute, 0), period: 24 * time.Hour / 5000, span: 24 * time.Hour, limiters: xeroLimiters},
	{name: "xero-day/gran=24m", keys: 300, rules: xeroDay(24*time.Minute, 0), period: 24 * time.Hour / 5000, span: 24 * time.Hour, limiters: xeroLimiters},
	{name: "xero-day/gran=default", keys: 300, rules: xeroDay(0, 0), period: 24 * time.Hour / 5000, span: 24 * time.Hour, limiters: xeroLimiters},
	{name: "xero-day/profile", keys: 300, rules: xeroDay(0, time.Minute), period: 24 * time.Hour / 5000, span: 24 * time.Hour, limiters: xeroLimiters},
}

// heapAlloc returns the bytes of live heap objects after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers and sweeps let go
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// perKey returns the heap growth from before to after, divided among n keys.
func perKey(before, after uint64, n int) float64 {
	return (float64(after) - float64(before)) / float64(n)
}

// BenchmarkBytesPerKey measures, from the heap (runtime.ReadMemStats after runtime.GC), the bytes
// one key holds in a fresh memory store after the scenario's traffic, and the same for
// x/time/rate limiters in a sync.Map: B/key. For the memory store it also reports what the store
// charges ristretto for the key (charged-B/key, its own estimate), the buckets its logs hold
// (buckets/key) and the share of keys in the pinned tier (keys at their limit). It measures; it
// does not hold the figures to issue 17's goals. The key strings themselves are held by the
// benchmark and not counted (the store keeps a reference to the caller's string); x/time/rate's
// boxing of the key into the sync.Map is.
//
// Each iteration is a whole measurement (ns/op is its time), so run it once:
//
//	go test -run '^$' -bench BytesPerKey -benchtime 1x -count 3 ./cache
func BenchmarkBytesPerKey(b *testing.B) {
	for _, sc := range heapScenarios {
		b.Run("memory/"+sc.name, func(b *testing.B) {
			var bytes, charged, buckets, pinned float64
			for range b.N {
				r := measureMemory(b, sc)
				bytes += r[0]
				charged += r[1]
				buckets += r[2]
				pinned += r[3]
			}
			n := float64(b.N)
			b.ReportMetric(bytes/n, "B/key")
			b.ReportMetric(charged/n, "charged-B/key")
			b.ReportMetric(buckets/n, "buckets/key")
			b.ReportMetric(pinned/n, "pinned-share")
		})
		b.Run("rate/"+sc.name, func(b *testing.B) {
			var bytes float64
			for range b.N {
				bytes += measureRate(b, sc)
			}
			b.ReportMetric(bytes/float64(b.N), "B/key")
		})
	}
}

// measureMemory plays sc to a fresh memory store and returns bytes per key from the heap, the
// cost charged per key, buckets per key and the share of keys pinned.
func measureMemory(b *testing.B, sc heapScenario) [4]float64 {
	b.Helper()
	s := mustStrategy(b, sc.rules...)
	names := benchKeys(sc.keys)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(start)
	m, err := NewMemory(MemoryConfig{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	before := heapAlloc()
	for t := time.Duration(0); t < sc.span; t += sc.period {
		clk.Set(start.Add(t))
		for _, k := range names {
			res, err := m.Reserve(ctx, s, k, 1)
			if err != nil {
				b.Fatal(err)
			}
			if !res.Allowed {
				b.Fatalf("%s: key %s refused at %v: the scenario's traffic must fit its rules", sc.name, k, t)
			}
		}
	}
	after := heapAlloc()
	if st := m.Stats(); st.EvictedLive != 0 || st.Rejected != 0 {
		b.Fatalf("%s: %+v: the store evicted or refused keys, so the heap does not hold every key", sc.name, st)
	}
	var charged, buckets, pinned int
	for _, k := range names {
		e, ok := m.lookup(ctx, k)
		if !ok {
			b.Fatalf("%s: key %s not found", sc.name, k)
		}
		e.mu.Lock()
		charged += e.heapCost()
		for _, c := range e.counters {
			if l, ok := c.(interface{ Buckets() int }); ok {
				buckets += l.Buckets()
			}
		}
		if e.pinned {
			pinned++
		}
		e.mu.Unlock()
	}
	runtime.KeepAlive(names)
	n := float64(sc.keys)
	return [4]float64{perKey(before, after, sc.keys), float64(charged) / n, float64(buckets) / n, float64(pinned) / n}
}

// measureRate plays sc to x/time/rate limiters in a sync.Map (one *rate.Limiter per key for one
// rule, a slice of them for several) and returns bytes per key from the heap.
func measureRate(b *testing.B, sc heapScenario) float64 {
	b.Helper()
	names := benchKeys(sc.keys)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var m sync.Map
	before := heapAlloc()
	for t := time.Duration(0); t < sc.span; t += sc.period {
		now := start.Add(t)
		for _, k := range names {
			v, ok := m.Load(k)
			if !ok {
				lims := sc.limiters()
				if len(lims) == 1 {
					v, _ = m.LoadOrStore(k, lims[0])
				} else {
					v, _ = m.LoadOrStore(k, lims)
				}
			}
			switch l := v.(type) {
			case *rate.Limiter:
				if !l.AllowN(now, 1) {
					b.Fatalf("%s: key %s refused at %v", sc.name, k, t)
				}
			case []*rate.Limiter:
				for _, x := range l {
					if !x.AllowN(now, 1) {
						b.Fatalf("%s: key %s refused at %v", sc.name, k, t)
					}
				}
			}
		}
	}
	after := heapAlloc()
	runtime.KeepAlive(&m)
	runtime.KeepAlive(names)
	return perKey(before, after, sc.keys)
}

package cache

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// rateMap is the anchor of issue 17: golang.org/x/time/rate limiters kept in a sync.Map by key,
// the way a program without this library would hold one limiter per tenant.
type rateMap struct {
	m       sync.Map
	newLim  func() *rate.Limiter
	created atomic.Int64
}

// get returns key's limiter, making it on first use.
func (r *rateMap) get(key string) *rate.Limiter {
	if v, ok := r.m.Load(key); ok {
		return v.(*rate.Limiter)
	}
	v, loaded := r.m.LoadOrStore(key, r.newLim())
	if !loaded {
		r.created.Add(1)
	}
	return v.(*rate.Limiter)
}

// benchKeys returns n distinct tenant-like keys.
func benchKeys(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	return names
}

// BenchmarkMemoryVsRate runs the memory store and x/time/rate side by side, in the same run, on
// one hot key and over 10 000 keys, from b.RunParallel goroutines (issue 17's speed goal).
//
// The pairs that do the same work: memory/reserve (record if it fits, else the wait) against
// rate/allow (take a token if there is one); memory/record (count whatever the limit) against
// rate/reserve (take a token whatever the balance, returning the delay).
//
// Two limit settings, both one rule of a minute:
//
//   - limits=open: 1<<30 per minute on both sides (rate.Every(time.Minute/(1<<30)), burst 1<<30),
//     so nothing is refused and every operation does the full work of a grant: the memory
//     store writes a bucket, the limiter takes a token. This is the fair comparison of the
//     admitting path, and the one a paced Transport under its limits runs.
//   - limits=60per1m: the realistic 60 per minute (rate.NewLimiter(rate.Every(time.Second), 60)).
//     After the first 60 operations of a key nearly every reserve and allow is refused (a
//     benchmark runs millions of operations a second), so this measures the refusal path and,
//     on the memory store, the pinned tier that keys at their limit move to.
//
// Run one package at a time, with a short benchtime on a shared machine:
//
//	go test -run '^$' -bench MemoryVsRate -benchmem -benchtime 300ms -count 3 ./cache
func BenchmarkMemoryVsRate(b *testing.B) {
	type limits struct {
		name   string
		rule   strategy.Rule
		newLim func() *rate.Limiter
	}
	for _, lim := range []limits{
		{"open", strategy.Rule{Limit: 1 << 30, Window: time.Minute},
			func() *rate.Limiter { return rate.NewLimiter(rate.Every(time.Minute/(1<<30)), 1<<30) }},
		{"60per1m", strategy.Rule{Limit: 60, Window: time.Minute},
			func() *rate.Limiter { return rate.NewLimiter(rate.Every(time.Second), 60) }},
	} {
		s := mustStrategy(b, lim.rule)
		for _, keys := range []int{1, 10_000} {
			names := benchKeys(keys)
			suffix := "/limits=" + lim.name + "/keys=" + strconv.Itoa(keys)
			for _, op := range []string{"reserve", "record"} {
				b.Run("memory-"+op+suffix, func(b *testing.B) {
					m, err := NewMemory(MemoryConfig{})
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close()
					ctx := context.Background()
					for _, k := range names {
						if err := m.Record(ctx, s, k, 1); err != nil {
							b.Fatal(err)
						}
					}
					var start atomic.Int64
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := int(start.Add(1) * 7919) // goroutines start apart in the key space
						var err error
						for pb.Next() {
							k := names[i%keys]
							i += 7
							if op == "record" {
								err = m.Record(ctx, s, k, 1)
							} else {
								_, err = m.Reserve(ctx, s, k, 1)
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
			for _, op := range []string{"allow", "reserve"} {
				b.Run("rate-"+op+suffix, func(b *testing.B) {
					r := &rateMap{newLim: lim.newLim}
					for _, k := range names {
						r.get(k).Allow()
					}
					var start atomic.Int64
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := int(start.Add(1) * 7919)
						for pb.Next() {
							k := names[i%keys]
							i += 7
							if op == "allow" {
								r.get(k).Allow()
							} else {
								r.get(k).Reserve()
							}
						}
					})
				})
			}
		}
	}
}

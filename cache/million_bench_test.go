package cache

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// BenchmarkMillionKeys is issue 17's scale check, run by hand (it takes about two minutes and
// 1 GiB): 1 000 000 live keys under one 60/1m rule, each sent a few requests within the minute,
// in a store sized for them (MaxKeys 1 000 000, MaxCost 1 GiB, so that nothing is evicted).
// It reports the heap per key and in all, what the store charges its MaxCost per key and in all
// (the MaxCost those keys need), and the time per Record with a million keys (one goroutine).
//
//	go test -run '^$' -bench MillionKeys -benchtime 1x -timeout 30m ./cache
func BenchmarkMillionKeys(b *testing.B) {
	const keys = 1_000_000
	for _, c := range []struct {
		name   string
		period time.Duration
	}{
		{"minute-steady", 24 * time.Hour / 5000}, // 4 requests in the minute
		{"minute-busy", time.Second},             // 61: one each second of the minute
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				millionKeys(b, keys, c.period)
			}
		})
	}
}

func millionKeys(b *testing.B, keys int, period time.Duration) {
	s := mustStrategy(b, strategy.Rule{Limit: 60, Window: time.Minute})
	names := benchKeys(keys)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewManual(start)
	m, err := NewMemory(MemoryConfig{MaxKeys: int64(keys), MaxCost: 1 << 30, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	runtime.GC()
	before := heapAlloc()
	ops := 0
	t := time.Now()
	for at := time.Duration(0); at < time.Minute; at += period {
		clk.Set(start.Add(at))
		for _, k := range names {
			if err := m.Record(ctx, s, k, 1); err != nil {
				b.Fatal(err)
			}
			ops++
		}
	}
	elapsed := time.Since(t)
	after := heapAlloc()
	if st := m.Stats(); st.EvictedLive != 0 || st.Rejected != 0 {
		b.Fatalf("%+v: the store evicted or refused keys", st)
	}
	var charged int64
	for _, k := range names {
		charged += int64(m.chargedCost(ctx, k))
	}
	runtime.KeepAlive(names)
	b.ReportMetric(perKey(before, after, keys), "B/key")
	b.ReportMetric(float64(after-before)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(charged)/float64(keys), "charged-B/key")
	b.ReportMetric(float64(charged)/(1<<20), "MaxCost-MiB")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(ops), "ns/record")
}

// chargedCost returns what the store charges its MaxCost for key's state (0 for no state).
func (m *Memory) chargedCost(ctx context.Context, key string) int {
	e, ok := m.lookup(ctx, key)
	if !ok {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return int(e.cost)
}

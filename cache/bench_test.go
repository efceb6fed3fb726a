package cache

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// BenchmarkMemory measures record, and record-and-check (Reserve), on the memory store from
// parallel goroutines, on one hot key and spread over 10 000 keys, with a minute and a day rule.
func BenchmarkMemory(b *testing.B) {
	s := mustStrategy(b, strategy.Rule{Limit: 1 << 30, Window: time.Minute},
		strategy.Rule{Limit: 1 << 30, Window: 24 * time.Hour, Granularity: time.Minute})
	for _, keys := range []int{1, 10_000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = "tenant-" + strconv.Itoa(i)
		}
		for _, op := range []string{"record", "reserve"} {
			b.Run(op+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				m, err := NewMemory(MemoryConfig{})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				ctx := context.Background()
				for _, k := range names {
					m.Record(ctx, s, k, 1)
				}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					var err error
					for pb.Next() {
						k := names[i%keys]
						i += 7
						if op == "record" {
							err = m.Record(ctx, s, k, 1)
						} else {
							_, err = m.Reserve(ctx, s, k, 1)
						}
					}
					if err != nil {
						b.Error(err)
					}
				})
			})
		}
	}
}

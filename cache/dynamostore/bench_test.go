package dynamostore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// BenchmarkOps measures each operation against dynalite on loopback (one round trip for Peek
// and the fixed window's Admit/Record, a read and a conditional write for the others), on 100
// keys in turn, one goroutine.
func BenchmarkOps(b *testing.B) {
	_, c := server(b)
	ctx := context.Background()
	big := strategy.Rule{Limit: 1 << 20, Window: time.Hour}
	strategies := []struct {
		name string
		s    *engine.Strategy
	}{
		{"tokenbucket", must(tokenbucket.New(big))},
		{"fixedwindow", must(fixedwindow.New(big))},
		{"rollingwindow", must(rollingwindow.New(strategy.Rule{Limit: 1 << 20, Window: time.Hour, Granularity: time.Minute}))},
	}
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	ops := []struct {
		name string
		fn   func(st *Store, s *engine.Strategy, key string) error
	}{
		{"Admit", func(st *Store, s *engine.Strategy, key string) error {
			_, err := st.Admit(ctx, s, key, 1)
			return err
		}},
		{"Reserve", func(st *Store, s *engine.Strategy, key string) error {
			_, err := st.Reserve(ctx, s, key, 1)
			return err
		}},
		{"Record", func(st *Store, s *engine.Strategy, key string) error { return st.Record(ctx, s, key, 1) }},
		{"Release", func(st *Store, s *engine.Strategy, key string) error { return st.Release(ctx, s, key, time.Now(), 1) }},
		{"Peek", func(st *Store, s *engine.Strategy, key string) error { _, err := st.Peek(ctx, s, key, 1); return err }},
	}
	for _, sc := range strategies {
		for _, op := range ops {
			b.Run(sc.name+"/"+op.name, func(b *testing.B) {
				st := newStore(b, c, Options{})
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if err := op.fn(st, sc.s, keys[i%len(keys)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

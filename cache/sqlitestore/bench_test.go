package sqlitestore

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

// BenchmarkAdmit measures one admission on a file store, on 100 keys in turn, under each
// strategy: the fixed window's single upsert against the encoded counters' transaction.
func BenchmarkAdmit(b *testing.B) {
	rules := []strategy.Rule{{Limit: 1 << 20, Window: time.Hour}}
	for _, c := range []struct {
		name string
		s    *engine.Strategy
	}{
		{"fixedwindow", must(fixedwindow.New(rules...))},
		{"tokenbucket", must(tokenbucket.New(rules[0]))},
		{"rollingwindow", must(rollingwindow.New(strategy.Rule{Limit: 1 << 20, Window: time.Hour, Granularity: time.Minute}))},
	} {
		b.Run(c.name, func(b *testing.B) {
			st, _ := open(b, Options{})
			keys := make([]string, 100)
			for i := range keys {
				keys[i] = "k" + strconv.Itoa(i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := st.Admit(ctx, c.s, keys[i%len(keys)], 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

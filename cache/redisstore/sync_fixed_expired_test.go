package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestSyncFixedDoesNotReviveExpired: on a rule of 10 a second (1 s buckets), 3 recorded at
// 0.2 s stop counting at 1.2 s; 1 more at 1.1 s. A Fixed report at 1.5 s with a reset 300 ms
// away caps the 1.1 s request at 1.8 s: 1 counts at 1.5 s, on the memory store and on Redis
// alike. The 3 that stopped counting at 1.2 s must not count again (they did on the memory
// store: capped before the log was brought to 1.5 s, they merged into the capped bucket).
func TestSyncFixedDoesNotReviveExpired(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0) // one clock, moved forward only: each store starts a minute on
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := newStore(t, srv.Client(), Options{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 10, Window: time.Second, Granularity: time.Second})
	ctx := context.Background()
	for i, st := range []cache.Store{mem, red} {
		name := []string{"memory", "redis"}[i]
		t0 := t0.Add(time.Duration(i) * time.Minute)
		clk.Set(t0.Add(200 * time.Millisecond))
		if err := st.Record(ctx, s, "k", 3); err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(1100 * time.Millisecond))
		if err := st.Record(ctx, s, "k", 1); err != nil {
			t.Fatal(err)
		}
		clk.Set(t0.Add(1500 * time.Millisecond))
		u := engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 9, Used: 1, Reset: 300 * time.Millisecond, Fixed: true}}}
		if err := st.(cache.Syncer).Sync(ctx, s, "k", u); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			at   time.Duration
			used int
		}{{1500 * time.Millisecond, 1}, {1800*time.Millisecond - time.Microsecond, 1}, {1800 * time.Millisecond, 0}} {
			clk.Set(t0.Add(c.at))
			if got := usedOf(t, st, s, "k")[0]; got != c.used {
				t.Errorf("%s: at %v: %d used, want %d", name, c.at, got, c.used)
			}
		}
	}
}

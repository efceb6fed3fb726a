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

// TestSyncFixedWindowExactly: a Fixed report (engine.Report.Fixed) on a rule of 10 a minute, on
// the memory store and on Redis alike, step by step:
//   - 10 recorded at t0, a report at 5 s of the fixed window's reset 20 s later: all 10 stop
//     counting at 25 s, not at 60 s;
//   - 10 recorded at 30 s, a used-up report at 31 s with no reset and Used 9 (the probe's
//     room): the rule holds exactly 9, dated 31 s;
//   - 1 recorded at 40 s (10 held), a report at 41 s of 7 remaining after the last figure of
//     0: the window has turned, and the rule holds the upstream's 3;
//   - the same on a paused key: the figure may be a late answer, and nothing is lowered.
func TestSyncFixedWindowExactly(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := newStore(t, srv.Client(), Options{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	stores := []cache.Store{mem, red}
	names := []string{"memory", "redis"}
	at := func(d time.Duration) { clk.Set(t0.Add(d)) }
	record := func(key string, n int) {
		for _, st := range stores {
			if err := st.Record(ctx, s, key, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	sync := func(key string, u engine.Update) {
		for _, st := range stores {
			if err := st.(cache.Syncer).Sync(ctx, s, key, u); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(key string, d time.Duration, used int) {
		t.Helper()
		at(d)
		for i, st := range stores {
			if got := usedOf(t, st, s, key)[0]; got != used {
				t.Errorf("%s: %s at %v: %d used, want %d", names[i], key, d, got, used)
			}
		}
	}
	fixed := func(remaining, used int, reset time.Duration) engine.Update {
		return engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: remaining, Used: used, Reset: reset, Fixed: true}}}
	}

	at(0)
	record("k", 10)
	at(5 * time.Second)
	sync("k", fixed(0, 10, 20*time.Second))
	want("k", 25*time.Second-time.Microsecond, 10)
	want("k", 25*time.Second, 0)

	at(30 * time.Second)
	record("k", 10)
	at(31 * time.Second)
	sync("k", fixed(0, 9, 0))
	want("k", 31*time.Second, 9)

	at(40 * time.Second)
	record("k", 1)
	want("k", 40*time.Second, 10)
	at(41 * time.Second)
	sync("k", fixed(7, 3, 0))
	want("k", 41*time.Second, 3)
	want("k", 41*time.Second+time.Minute-time.Microsecond, 3)
	want("k", 41*time.Second+time.Minute, 0)

	// The same on a paused key: the figure of 7 left is read during the pause, and is kept
	// as a figure only.
	at(200 * time.Second)
	record("p", 10)
	sync("p", engine.Update{Pause: 30 * time.Second, Reports: fixed(0, 9, 0).Reports})
	want("p", 200*time.Second, 9)
	record("p", 1)
	at(210 * time.Second)
	sync("p", fixed(7, 3, 0))
	want("p", 210*time.Second, 10)
}

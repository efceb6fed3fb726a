package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestMemoryFixedReportEndsRefusals: a key of 10 a minute, full at t0 and refused twice (the
// second refusal answered from the entry, without the counters), is told by a Fixed report at
// 1 s that the upstream's window resets 4 s later. The next Reserve is refused with exactly
// that wait, and at 5 s one is granted, not at 60 s.
func TestMemoryFixedReportEndsRefusals(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(t0)
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := storetest.Strategy(t, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	reserve := func() engine.Result {
		t.Helper()
		res, err := m.Reserve(ctx, s, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for range 10 {
		if !reserve().Allowed {
			t.Fatal("refused within the limit")
		}
	}
	clk.Set(t0.Add(time.Second))
	for range 2 {
		if res := reserve(); res.Allowed || res.Wait != 59*time.Second {
			t.Fatalf("full key: %+v, want refused for 59s", res)
		}
	}
	u := engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 0, Used: 10, Reset: 4 * time.Second, Fixed: true}}}
	if err := m.Sync(ctx, s, "k", u); err != nil {
		t.Fatal(err)
	}
	if res := reserve(); res.Allowed || res.Wait != 4*time.Second {
		t.Errorf("after the report: %+v, want refused for 4s", res)
	}
	clk.Set(t0.Add(5 * time.Second))
	if res := reserve(); !res.Allowed {
		t.Errorf("at the upstream's reset: %+v, want granted", res)
	}
}

// TestMemoryFixedReportDoesNotReviveExpired: on a rule of 10 a second (1 s buckets), 3
// recorded at 0.2 s stop counting at 1.2 s, 1 more at 1.1 s. A Fixed report at 1.5 s with a
// reset 300 ms away caps the 1.1 s request at 1.8 s: exactly 1 counts from 1.5 s to 1.8 s, 0
// then. (Capped before the log was brought to 1.5 s, the 3 merged into the capped bucket and
// counted again until 1.8 s.) cache/redisstore checks Redis alike.
func TestMemoryFixedReportDoesNotReviveExpired(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(t0.Add(200 * time.Millisecond))
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := storetest.Strategy(t, strategy.Rule{Limit: 10, Window: time.Second, Granularity: time.Second})
	ctx := context.Background()
	if err := m.Record(ctx, s, "k", 3); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(1100 * time.Millisecond))
	if err := m.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(1500 * time.Millisecond))
	u := engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 9, Used: 1, Reset: 300 * time.Millisecond, Fixed: true}}}
	if err := m.Sync(ctx, s, "k", u); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   time.Duration
		used int
	}{{1500 * time.Millisecond, 1}, {1800*time.Millisecond - time.Microsecond, 1}, {1800 * time.Millisecond, 0}} {
		clk.Set(t0.Add(c.at))
		if got := storetest.Used(t, m, s, "k")[0]; got != c.used {
			t.Errorf("at %v: %d used, want %d", c.at, got, c.used)
		}
	}
}

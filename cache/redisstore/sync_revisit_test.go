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

// One Sync whose reports raise one counter in bucket A, then B, then A again (two reports
// on one rule, which CheckUpdate accepts, or rules sharing a counter): the script reads bucket
// A's count back from Redis, missing its own unsaved write, so a raise is lost from the bucket
// while the total keeps it. The total then never drops to what the buckets hold: a phantom
// usage that outlives every window.
func TestSyncRevisitingBucketLosesNoRaise(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := newStore(t, srv.Client(), Options{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	u := engine.Update{Reports: []engine.Report{
		{Rule: 0, Remaining: 50, Used: 10, Reset: 10 * time.Second},
		{Rule: 0, Remaining: 40, Used: 20, Reset: 20 * time.Second},
		{Rule: 0, Remaining: 30, Used: 30, Reset: 10 * time.Second},
	}}
	if err := s.CheckUpdate(u); err != nil {
		t.Fatal(err)
	}
	for _, st := range []cache.Syncer{mem, red} {
		if err := st.Sync(ctx, s, "k", u); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []time.Duration{0, 15 * time.Second, 25 * time.Second, 2 * time.Minute} {
		clk.Set(t0.Add(d))
		m, r := usedOf(t, mem, s, "k")[0], usedOf(t, red, s, "k")[0]
		if m != r {
			t.Errorf("at %v: memory counts %d, redis %d", d, m, r)
		}
	}
}

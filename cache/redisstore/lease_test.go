package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/internal/redisfleet"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest/leasetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestLeasesPassLeaserSuite runs the Leaser cases on one Redis server, on a manual clock.
func TestLeasesPassLeaserSuite(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	st := newStore(t, srv.Client(), Options{Clock: clk})
	leasetest.Run(t, st, clk)
}

// TestAbandonedLeaseFreesAfterTTL: on Redis TIME, a lease taken and never released (its process crashed)
// frees by itself once its real TTL of 200 ms has passed; the set's own TTL is at most the
// lease's plus Slack, so an abandoned set goes too; and a key that holds another type is
// started afresh, reported as StateLost.
func TestAbandonedLeaseFreesAfterTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	var lost []observe.Event
	st := newStore(t, c, Options{Slack: 100 * time.Millisecond, Observer: observe.Func(func(e observe.Event) {
		if e.Kind == observe.StateLost {
			lost = append(lost, e)
		}
	})})
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	crashed, err := st.AcquireLease(ctx, "tenant", 1, ttl)
	if err != nil || !crashed.Acquired() {
		t.Fatalf("first lease: %+v %v", crashed, err)
	}
	if pttl := c.PTTL(ctx, st.LeaseKey("tenant")).Val(); pttl <= 0 || pttl > 300*time.Millisecond {
		t.Errorf("the set's TTL %v, want in (0, 300ms]: the lease's 200ms + Slack 100ms", pttl)
	}
	full, err := st.AcquireLease(ctx, "tenant", 1, ttl)
	if err != nil || full.Acquired() || full.Wait <= 0 || full.Wait > ttl {
		t.Fatalf("second lease: %+v %v, want refused with a wait in (0, 200ms]", full, err)
	}
	time.Sleep(full.Wait)
	again, err := st.AcquireLease(ctx, "tenant", 1, ttl)
	if err != nil || !again.Acquired() || again.Held != 1 {
		t.Fatalf("after the crashed lease's TTL: %+v %v, want a lease, held 1", again, err)
	}
	if err := c.Set(ctx, st.LeaseKey("odd"), "not a set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := st.AcquireLease(ctx, "odd", 1, ttl); err != nil || !l.Acquired() {
		t.Fatalf("over a string: %+v %v, want a lease on a fresh set", l, err)
	}
	if len(lost) != 1 || lost[0].Key != "odd" {
		t.Errorf("StateLost events %v, want one for key \"odd\"", lost)
	}
}

// clusterLeases: on a Cluster, each key's leases live in its hash tag, the slot of its
// rate-limit state, and the Leaser cases pass.
func clusterLeases(t *testing.T, cl *redisfleet.Cluster) {
	clk := clock.NewManual(t0)
	st := openCluster(t, cl.Addrs(), clk)
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: time.Minute})
	for _, key := range []string{"a", "b", "c", "d"} {
		if got, want := cl.Slot(st.LeaseKey(key)), cl.Slot(st.Keys(s, key)[0]); got != want {
			t.Errorf("key %q: leases in slot %d, state in slot %d, want one slot", key, got, want)
		}
	}
	leasetest.Run(t, st, clk)
}

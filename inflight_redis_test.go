package ratemonitor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// redisLeaseStore returns a Redis store with a prefix of the test's own.
func redisLeaseStore(t *testing.T, srv *redistest.Server) *redisstore.Store {
	st, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: "inflight-" + strings.ReplaceAll(t.Name(), "/", "-"), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestInFlightRedisShared: two Transports over their own Store values on one Redis server, as
// two processes would be, share WithInFlight(3): 16 goroutines × 5 paced requests, and the
// upstream never sees more than 3 at once.
func TestInFlightRedisShared(t *testing.T) {
	srv := redistest.Start(t)
	up, _, most := countingUpstream(t)
	rules := WithRules(strategy.Rule{Limit: 1000, Window: time.Minute})
	a := newTransport(t, nil, rules, WithStore(redisLeaseStore(t, srv)), WithPacing(), WithInFlight(3))
	b := newTransport(t, nil, rules, WithStore(redisLeaseStore(t, srv)), WithPacing(), WithInFlight(3))
	concurrentRun(t, []*Transport{a, b}, up.URL, 16, 5)
	if m := most.Load(); m > 3 || m < 1 {
		t.Errorf("the upstream saw %d in flight at most, want 1..3", m)
	}
}

// TestInFlightRedisLease: on Redis TIME with a 100 ms lease, an open body keeps its slot for
// 400 ms (renewed); a Transport closed with a body still open (its process crashed) frees the
// slot only when the lease expires, and a waiting Transport of another process then gets it.
func TestInFlightRedisLease(t *testing.T) {
	srv := redistest.Start(t)
	up, _, _ := countingUpstream(t)
	key := strings.TrimPrefix(up.URL, "http://")
	const ttl = 100 * time.Millisecond
	sa, sb := redisLeaseStore(t, srv), redisLeaseStore(t, srv)
	opts := []Option{WithRules(minute), WithInFlight(1), WithInFlightLease(ttl)}
	a, err := New(nil, append(opts, WithStore(sa))...)
	if err != nil {
		t.Fatal(err)
	}
	b := newTransport(t, nil, append(opts, WithStore(sb))...)
	ctx := context.Background()
	resp, err := send(a, ctx, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	free := func() bool {
		l, err := sb.AcquireLease(ctx, key, 1, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if l.Acquired() {
			sb.ReleaseLease(ctx, key, l.ID)
		}
		return l.Acquired()
	}
	for range 8 {
		time.Sleep(ttl / 2)
		if free() {
			t.Fatal("the slot of an open body freed: its lease was not renewed")
		}
	}
	a.Close() // the crash: nothing renews a's lease from now on
	closed := time.Now()
	r, err := send(b, ctx, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if took := time.Since(closed); took > ttl+InFlightPoll+100*time.Millisecond {
		t.Errorf("b got the crashed slot after %v, want within the lease (%v) and a poll", took, ttl)
	}
}

// TestInFlightDegraded: with the shared store down, under Degrade, slots are counted in this
// process at its share (0.5 of WithInFlight(4): 2): 12 concurrent requests to an upstream
// that takes 20 ms each all succeed, never more than 2 at once; InFlight is 0 after.
func TestInFlightDegraded(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: "inflight-degraded"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var now, most atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
	}))
	defer up.Close()
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 1000, Window: time.Second}), WithStore(st), WithPacing(),
		WithDegraded(DegradedConfig{Share: 0.5, NoHoldBack: true}), WithLogger(discard), WithInFlight(4))
	srv.Stop()
	concurrentRun(t, []*Transport{tr}, up.URL, 12, 1)
	if m := most.Load(); m != 2 {
		t.Errorf("degraded: the upstream saw %d in flight at most, want 2 (half of 4)", m)
	}
}

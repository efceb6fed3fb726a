package degradetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// movedStore is a Redis store that says which master it reached as a Sentinel store does
// (redisstore.Store.SentinelMaster), the test choosing the answer.
type movedStore struct {
	*redisstore.Store
	master *atomic.Value // string
}

func (m movedStore) SentinelMaster() string { return m.master.Load().(string) }

// TestDegradeMasterChange: a healthy paced Transport whose store meets a new Sentinel master
// does not use the grant the new master made (it stays counted there), reports Degraded with
// the change, and grants nothing, and does not probe, until the hold-back (the longest window)
// has passed; then it is back. A probe that meets a new master after an outage waits likewise
// until the longest window from the outage's start; a Peek that meets one goes degraded too.
// (Before: the grant was used at once, and
// the fleet test's SENTINEL FAILOVER granted 39 in a second, limit 20.)
func TestDegradeMasterChange(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observe.Recorder{}
	master := &atomic.Value{}
	master.Store("127.0.0.1:1")
	st := newRedisStore(t, srv)
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	s := rolling(t, rule)
	tr := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(movedStore{st, master}),
		ratemonitor.WithClock(clk), ratemonitor.WithPacing(), ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard))
	ctx := context.Background()
	reserve := func(what string, allowed bool, wait time.Duration) {
		t.Helper()
		if got := reserveOnce(t, tr, rec, clk, "k"); got.allowed != allowed || got.wait != wait {
			t.Fatalf("%s: %+v; want allowed %v, wait %v", what, got, allowed, wait)
		}
	}
	events := func(want ...string) {
		t.Helper()
		if got := kinds(rec.Events()); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
	}

	reserve("first master", true, 0)
	master.Store("127.0.0.1:2")
	reserve("new master: held back", false, time.Minute)
	if n := usedIn(t, st, s, "k"); n != 2 {
		t.Errorf("the new master counts %d, want 2 (the unused grant stays counted)", n)
	}
	events("degraded")
	// The event's error names both masters (the root package's TestDegradeMasterChangedError
	// checks its type and fields).
	evs := rec.Events()
	i := slices.IndexFunc(evs, func(e observe.Event) bool { return e.Kind == observe.Degraded })
	if err := evs[i].Err; err == nil || !strings.HasPrefix(err.Error(), "ratemonitor: the Redis master changed from 127.0.0.1:1 to 127.0.0.1:2 (Sentinel failover)") {
		t.Errorf("Degraded event's error %v, want the change from 127.0.0.1:1 to 127.0.0.1:2", err)
	}
	clk.Advance(ratemonitor.DefaultProbeInterval)
	reserve("a probe interval later: no probe, still held back", false, time.Minute-ratemonitor.DefaultProbeInterval)
	events("degraded")
	clk.Advance(time.Minute - ratemonitor.DefaultProbeInterval)
	reserve("the longest window later: back, settling", true, 0)
	events("degraded", "recovered")

	// An outage, then a probe that meets another master.
	clk.Advance(2 * time.Minute) // settled
	reserve("healthy", true, 0)
	srv.Stop()
	reserve("outage: held back", false, time.Minute)
	srv.Restart()
	master.Store("127.0.0.1:3")
	clk.Advance(ratemonitor.DefaultProbeInterval)
	reserve("probe meets a new master: too soon", false, time.Minute-ratemonitor.DefaultProbeInterval)
	events("degraded", "recovered", "degraded")
	clk.Advance(time.Minute - ratemonitor.DefaultProbeInterval)
	reserve("the longest window from the outage: back", true, 0)
	events("degraded", "recovered", "degraded", "recovered")

	// A Peek (WaitTime) that meets a new master goes degraded as well.
	clk.Advance(2 * time.Minute) // settled
	master.Store("127.0.0.1:4")
	if wait, err := tr.WaitTime(ctx, "k", 1); err != nil || wait != time.Minute {
		t.Errorf("WaitTime on a new master: %v, %v; want the hold-back, 1m0s", wait, err)
	}
	events("degraded", "recovered", "degraded", "recovered", "degraded")
	waitRedisRedialed(t)
}

// heldStore is a movedStore whose next Reserve, once armed, makes its grant on Redis and then
// waits for release before it answers: a call under way while another one meets a new master.
type heldStore struct {
	movedStore
	armed   *atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func (h heldStore) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := h.movedStore.Reserve(ctx, s, key, n)
	if h.armed.CompareAndSwap(true, false) {
		h.reached <- struct{}{}
		<-h.release
	}
	return res, err
}

// TestDegradeMasterChangeInFlight: a Reserve under way on the shared store while another call
// of the same Transport meets a new Sentinel master (and goes degraded) does not use its grant
// either, though that other call has noted the new master already: it may be the new master's,
// made without the old master's last grants. It stays counted there, and the caller waits out
// the hold-back. (Before: the grant was used; under load, with twelve senders and a watcher a
// process, the fleet test's SENTINEL FAILOVER granted 21 in a second, limit 20: the new
// master's grant on top of the old master's lost ones.)
func TestDegradeMasterChangeInFlight(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observe.Recorder{}
	master := &atomic.Value{}
	master.Store("127.0.0.1:1")
	st := newRedisStore(t, srv)
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	s := rolling(t, rule)
	held := heldStore{movedStore{st, master}, &atomic.Bool{}, make(chan struct{}), make(chan struct{})}
	tr := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(held),
		ratemonitor.WithClock(clk), ratemonitor.WithPacing(), ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard))
	ctx := context.Background()

	if got := reserveOnce(t, tr, rec, clk, "k"); !got.allowed {
		t.Fatalf("first master: %+v, want a grant", got)
	}
	held.armed.Store(true)
	from, sleepers := len(rec.Events()), clk.Sleepers()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := tr.Reserve(rctx, "k", 1)
		done <- err
	}()
	<-held.reached // granted on Redis, not answered yet
	master.Store("127.0.0.1:2")
	if wait, err := tr.WaitTime(ctx, "k", 1); err != nil || wait != time.Minute {
		t.Fatalf("WaitTime on the new master: %v, %v; want the hold-back, 1m0s", wait, err)
	}
	close(held.release)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		evs := rec.Events()[from:]
		if slices.ContainsFunc(evs, func(e observe.Event) bool { return e.Key == "k" && e.Kind == observe.Granted }) {
			t.Fatalf("the Reserve under way when the new master was met was granted (events %v), want it held back", rec.Strings())
		}
		i := slices.IndexFunc(evs, func(e observe.Event) bool { return e.Key == "k" && e.Kind == observe.Refused })
		if i >= 0 && clk.Sleepers() > sleepers {
			if evs[i].Wait != time.Minute {
				t.Errorf("the Reserve under way: refused with wait %v, want the hold-back, 1m0s", evs[i].Wait)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the Reserve under way when the new master was met returned %v (events %v), want it held back", err, rec.Strings())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Reserve under way: neither granted nor held back within 30 s (events %v)", rec.Strings())
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the held-back Reserve, cancelled while it slept: %v, want context.Canceled", err)
	}
	if n := usedIn(t, st, s, "k"); n != 2 {
		t.Errorf("the new master counts %d, want 2 (the unused grant stays counted)", n)
	}
	if got := kinds(rec.Events()); !slices.Equal(got, []string{"degraded"}) {
		t.Errorf("events %v, want [degraded]", got)
	}
}

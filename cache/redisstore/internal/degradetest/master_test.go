package degradetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
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

// TestNewMasterGrantUnusedUntilHoldBack: a healthy paced Transport whose store meets a new Sentinel master
// does not use the grant the new master made (it stays counted there), reports Degraded with
// the change, and grants nothing, and does not probe, until the hold-back (the longest window)
// has passed; then it is back. A probe that meets a new master after an outage waits likewise
// until the longest window from the outage's start; a Peek that meets one goes degraded too.
// (Before: the grant was used at once, and
// the fleet test's SENTINEL FAILOVER granted 39 in a second, limit 20.)
func TestNewMasterGrantUnusedUntilHoldBack(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observetest.Recorder{}
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
	// The event's error names both masters (the root package's TestDegradeMasterChangeReportsBothMasters
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

// TestNewMasterFencesReserveInFlight: a Reserve under way on the shared store while another call
// of the same Transport meets a new Sentinel master (and goes degraded) does not use its grant
// either, though that other call has noted the new master already: it may be the new master's,
// made without the old master's last grants. It stays counted there, and the caller waits out
// the hold-back. (Before: the grant was used; under load, with twelve senders and a watcher a
// process, the fleet test's SENTINEL FAILOVER granted 21 in a second, limit 20: the new
// master's grant on top of the old master's lost ones.)
func TestNewMasterFencesReserveInFlight(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observetest.Recorder{}
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

// TestProbeMeetingNewMasterReturns: after an outage longer than the longest window, during
// which the master changed, the probe that brings the Transport back does not fence it again,
// whatever call makes it: a WaitTime (Peek: it did, comparing the master it saw before its own
// probe; found in a review of the in-flight fence), a paced Reserve, or a monitoring RoundTrip
// (Record). The probing call is served as a healthy Transport's would be (no wait, granted,
// sent), and so is the next call.
func TestProbeMeetingNewMasterReturns(t *testing.T) {
	ctx := context.Background()
	type call func(t *testing.T, tr *ratemonitor.Transport, rec *observetest.Recorder, clk *clock.Manual) (served bool, what string)
	reserve := func(t *testing.T, tr *ratemonitor.Transport, rec *observetest.Recorder, clk *clock.Manual) (bool, string) {
		got := reserveOnce(t, tr, rec, clk, "k")
		return got.allowed, fmt.Sprintf("%+v", got)
	}
	send := func(t *testing.T, tr *ratemonitor.Transport, rec *observetest.Recorder, clk *clock.Manual) (bool, string) {
		err := doKey(tr, ctx, "k")
		return err == nil, fmt.Sprint(err)
	}
	peek := func(t *testing.T, tr *ratemonitor.Transport, rec *observetest.Recorder, clk *clock.Manual) (bool, string) {
		wait, err := tr.WaitTime(ctx, "k", 1)
		return err == nil && wait == 0, fmt.Sprintf("wait %v, %v", wait, err)
	}
	for _, c := range []struct {
		name  string
		base  http.RoundTripper
		opt   ratemonitor.Option
		paced bool // refused during the outage (the hold-back); a monitoring call is sent
		call  call // before the outage, during it, and after the return
		probe call
	}{
		{"Peek", nil, ratemonitor.WithPacing(), true, reserve, peek},
		{"Reserve", nil, ratemonitor.WithPacing(), true, reserve, reserve},
		{"Record", &okBase{}, ratemonitor.WithStoreErrorPolicy(ratemonitor.Degrade), false, send, send},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, clk, rec, master, tr := newMoved(t, c.base, nil, c.opt)
			if ok, what := c.call(t, tr, rec, clk); !ok {
				t.Fatalf("first: %s", what)
			}
			srv.Stop()
			if ok, what := c.call(t, tr, rec, clk); ok && c.paced {
				t.Fatalf("outage: %s", what)
			}
			clk.Advance(2 * time.Minute)
			srv.Restart()
			master.Store("127.0.0.1:3")
			ok, what := c.probe(t, tr, rec, clk)
			t.Logf("probe by %s after the long outage, on a new master: %s; events %v", c.name, what, kinds(rec.Events()))
			if !ok || !slices.Equal(kinds(rec.Events()), []string{"degraded", "recovered"}) {
				t.Errorf("probe by %s fenced itself: %s, events %v; want it served, [degraded recovered]", c.name, what, kinds(rec.Events()))
			}
			if ok, what := c.call(t, tr, rec, clk); !ok {
				t.Errorf("the next call after the return: %s, events %v; want it served", what, kinds(rec.Events()))
			}
			waitRedisRedialed(t)
		})
	}
}

// TestStaleAnswerAfterOutageNotUsed: a Reserve under way (on the old master) across a whole
// outage and the return on a new master, answering only after the return, is not used (it
// started before the switch) and does not make the Transport degraded again (it did: every
// key held back another window for one stale answer).
func TestStaleAnswerAfterOutageNotUsed(t *testing.T) {
	var held heldStore
	srv, clk, rec, master, tr := newMoved(t, nil, func(m movedStore) cache.Store {
		held = heldStore{m, &atomic.Bool{}, make(chan struct{}), make(chan struct{})}
		return held
	}, ratemonitor.WithPacing())
	if got := reserveOnce(t, tr, rec, clk, "k"); !got.allowed {
		t.Fatalf("first: %+v", got)
	}
	held.armed.Store(true)
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := tr.Reserve(rctx, "k", 1); done <- err }()
	<-held.reached
	srv.Stop()
	if got := reserveOnce(t, tr, rec, clk, "j"); got.allowed {
		t.Fatalf("outage: %+v", got)
	}
	clk.Advance(2 * time.Minute)
	srv.Restart()
	master.Store("127.0.0.1:3")
	if got := reserveOnce(t, tr, rec, clk, "j"); !got.allowed {
		t.Fatalf("back: %+v events %v", got, kinds(rec.Events()))
	}
	t.Logf("before the held call answers: %v", kinds(rec.Events()))
	close(held.release)
	time.Sleep(200 * time.Millisecond)
	t.Logf("after the held call answers: %v", kinds(rec.Events()))
	got := reserveOnce(t, tr, rec, clk, "j")
	t.Logf("next Reserve on another key: %+v", got)
	if !got.allowed || !slices.Equal(kinds(rec.Events()), []string{"degraded", "recovered"}) {
		t.Errorf("one stale answer re-degraded the Transport: %+v, events %v; want granted, [degraded recovered]", got, kinds(rec.Events()))
	}
	cancel()
	<-done
	waitRedisRedialed(t)
}

// TestNewMasterWhileSettlingFenced: a Reserve that meets a new master while the Transport
// settles after an outage does not use its grant: it is fenced as when healthy.
func TestNewMasterWhileSettlingFenced(t *testing.T) {
	srv, clk, rec, master, tr := newMoved(t, nil, nil, ratemonitor.WithPacing())
	if got := reserveOnce(t, tr, rec, clk, "k"); !got.allowed {
		t.Fatalf("first: %+v", got)
	}
	srv.Stop()
	reserveOnce(t, tr, rec, clk, "k")
	clk.Advance(2 * time.Minute)
	srv.Restart()
	if got := reserveOnce(t, tr, rec, clk, "k"); !got.allowed {
		t.Fatalf("back: %+v", got)
	}
	t.Logf("settling now: events %v", kinds(rec.Events()))
	master.Store("127.0.0.1:2")
	got := reserveOnce(t, tr, rec, clk, "k")
	t.Logf("Reserve on a new master while settling: %+v, events %v", got, kinds(rec.Events()))
	if got.allowed || !slices.Equal(kinds(rec.Events()), []string{"degraded", "recovered", "degraded"}) {
		t.Errorf("a Reserve that met a new master while settling: %+v, events %v; want refused, [degraded recovered degraded]", got, kinds(rec.Events()))
	}
	waitRedisRedialed(t)
}

// newMoved makes a Transport with one rule of 20 a minute over a real Redis store that names
// the Sentinel master the test stores in master (first "127.0.0.1:1"), on a manual clock at
// t0, its events recorded; wrap, when not nil, wraps the store the Transport uses; opts are
// added (WithPacing, a policy).
func newMoved(t *testing.T, base http.RoundTripper, wrap func(movedStore) cache.Store, opts ...ratemonitor.Option) (*redistest.Server, *clock.Manual, *observetest.Recorder, *atomic.Value, *ratemonitor.Transport) {
	t.Helper()
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observetest.Recorder{}
	master := &atomic.Value{}
	master.Store("127.0.0.1:1")
	var st cache.Store = movedStore{newRedisStore(t, srv), master}
	if wrap != nil {
		st = wrap(st.(movedStore))
	}
	tr := newTransport(t, base, append([]ratemonitor.Option{ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}),
		ratemonitor.WithStore(st), ratemonitor.WithClock(clk), ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard)}, opts...)...)
	return srv, clk, rec, master, tr
}

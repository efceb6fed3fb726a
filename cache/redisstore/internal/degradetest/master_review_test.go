package degradetest

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestDegradeProbeByPeekOnNewMaster: after an outage longer than the longest window, during
// which the master changed, the probe that a WaitTime (Peek) makes brings the Transport back
// and does not fence it again (it did: the Peek compared the master it saw before its own
// probe; review of the in-flight fence).
func TestDegradeProbeByPeekOnNewMaster(t *testing.T) {
	srv, clk, rec, master, tr := newMoved(t, nil, nil, ratemonitor.WithPacing())
	ctx := context.Background()
	if got := reserveOnce(t, tr, rec, clk, "k"); !got.allowed {
		t.Fatalf("first: %+v", got)
	}
	srv.Stop()
	if got := reserveOnce(t, tr, rec, clk, "k"); got.allowed {
		t.Fatalf("outage: %+v", got)
	}
	clk.Advance(2 * time.Minute)
	srv.Restart()
	master.Store("127.0.0.1:3")
	wait, err := tr.WaitTime(ctx, "k", 1)
	t.Logf("WaitTime after the long outage on a new master: %v, %v; events %v", wait, err, kinds(rec.Events()))
	if wait != 0 || !slices.Equal(kinds(rec.Events()), []string{"degraded", "recovered"}) {
		t.Errorf("probe by Peek fenced itself: wait %v, events %v; want 0, [degraded recovered]", wait, kinds(rec.Events()))
	}
	if got := reserveOnce(t, tr, rec, clk, "k"); !got.allowed {
		t.Errorf("the next Reserve after the return: %+v, events %v; want granted", got, kinds(rec.Events()))
	}
	waitRedisRedialed(t)
}

// TestDegradeProbeByReserveOnNewMaster: the same, the probe made by a paced Reserve.
func TestDegradeProbeByReserveOnNewMaster(t *testing.T) {
	srv, clk, rec, master, tr := newMoved(t, nil, nil, ratemonitor.WithPacing())
	if got := reserveOnce(t, tr, rec, clk, "k"); !got.allowed {
		t.Fatalf("first: %+v", got)
	}
	srv.Stop()
	if got := reserveOnce(t, tr, rec, clk, "k"); got.allowed {
		t.Fatalf("outage: %+v", got)
	}
	clk.Advance(2 * time.Minute)
	srv.Restart()
	master.Store("127.0.0.1:3")
	got := reserveOnce(t, tr, rec, clk, "k")
	t.Logf("Reserve probe: %+v events %v", got, kinds(rec.Events()))
	if !got.allowed || !slices.Equal(kinds(rec.Events()), []string{"degraded", "recovered"}) {
		t.Errorf("Reserve probe: %+v, events %v; want granted, [degraded recovered]", got, kinds(rec.Events()))
	}
	waitRedisRedialed(t)
}

// TestDegradeProbeByRecordOnNewMaster: the same, the probe made by a monitoring RoundTrip
// (Record).
func TestDegradeProbeByRecordOnNewMaster(t *testing.T) {
	srv, clk, rec, master, tr := newMoved(t, &okBase{}, nil, ratemonitor.WithStoreErrorPolicy(ratemonitor.Degrade))
	ctx := context.Background()
	if err := doKey(tr, ctx, "k"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_ = doKey(tr, ctx, "k")
	t.Logf("after outage call: events %v", kinds(rec.Events()))
	clk.Advance(2 * time.Minute)
	srv.Restart()
	master.Store("127.0.0.1:3")
	err := doKey(tr, ctx, "k")
	t.Logf("after long outage, record probe: err %v events %v", err, kinds(rec.Events()))
	if !slices.Equal(kinds(rec.Events()), []string{"degraded", "recovered"}) {
		t.Errorf("probe by Record fenced itself: events %v; want [degraded recovered]", kinds(rec.Events()))
	}
	waitRedisRedialed(t)
}

// TestDegradeStaleAnswerAfterOutage: a Reserve under way (on the old master) across a whole
// outage and the return on a new master, answering only after the return, is not used (it
// started before the switch) and does not make the Transport degraded again (it did: every
// key held back another window for one stale answer).
func TestDegradeStaleAnswerAfterOutage(t *testing.T) {
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

// TestDegradeMasterChangeWhileSettling: a Reserve that meets a new master while the Transport
// settles after an outage does not use its grant: it is fenced as when healthy.
func TestDegradeMasterChangeWhileSettling(t *testing.T) {
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
func newMoved(t *testing.T, base http.RoundTripper, wrap func(movedStore) cache.Store, opts ...ratemonitor.Option) (*redistest.Server, *clock.Manual, *observe.Recorder, *atomic.Value, *ratemonitor.Transport) {
	t.Helper()
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observe.Recorder{}
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

package degradetest

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

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

// TestOutageHandledAsPolicySays: what each choice of policy does when the Redis store cannot be
// reached (a real store, its server stopped). Paced, by default: Degrade, so degraded mode
// (a Degraded event, the hold-back: nothing sent for the window, a *DeadlineError for a
// context of 5 s, and the error handler not called: an outage is not a store error under
// Degrade). Monitoring, by default: SendUncounted (sent uncounted, the handler called, no Degraded). Monitoring with WithDegraded:
// Degrade (sent, recorded on the memory store at the share, 60 ÷ 3). Paced with SendUncounted: sent,
// not degraded. Paced with SendNothing: a *StoreError, nothing sent, not degraded. The root
// package's TestDegradedConfigRefusedOrDefaulted checks the same choices on the Transport's fields.
func TestOutageHandledAsPolicySays(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	srv.Stop()
	for _, c := range []struct {
		name     string
		opts     []ratemonitor.Option
		degraded bool // a Degraded event
		sent     int
		storeErr bool // RoundTrip returns a *StoreError
		limit    int  // AllocationUsed's limit while degraded; 0: not asked
	}{
		{name: "paced", opts: []ratemonitor.Option{ratemonitor.WithPacing()}, degraded: true},
		{name: "monitoring", sent: 1},
		{name: "monitoring, WithDegraded", opts: []ratemonitor.Option{ratemonitor.WithDegraded(ratemonitor.DegradedConfig{Processes: 3})}, degraded: true, sent: 1, limit: 20},
		{name: "paced, fail open", opts: []ratemonitor.Option{ratemonitor.WithPacing(), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted)}, sent: 1},
		{name: "paced, fail closed", opts: []ratemonitor.Option{ratemonitor.WithPacing(), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing)}, storeErr: true},
	} {
		rec := &observetest.Recorder{}
		base := &okBase{}
		var handled atomic.Int64
		tr := newTransport(t, base, append([]ratemonitor.Option{ratemonitor.WithRules(minute), ratemonitor.WithStore(st),
			ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard),
			ratemonitor.WithErrorHandler(func(*http.Request, string, error) { handled.Add(1) })}, c.opts...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := doKey(tr, ctx, "k")
		cancel()
		var se *ratemonitor.StoreError
		var de *ratemonitor.DeadlineError
		switch {
		case c.storeErr && !errors.As(err, &se):
			t.Errorf("%s: %v, want a *StoreError", c.name, err)
		case !c.storeErr && c.sent == 0 && (!errors.As(err, &de) || de.Wait <= 55*time.Second || de.Wait > time.Minute):
			t.Errorf("%s: %v, want a *DeadlineError for the hold-back's minute", c.name, err)
		case c.sent > 0 && err != nil:
			t.Errorf("%s: %v, want it sent", c.name, err)
		}
		if n := base.count(); n != c.sent {
			t.Errorf("%s: sent %d, want %d", c.name, n, c.sent)
		}
		if got := slices.Equal(kinds(rec.Events()), []string{"degraded"}); got != c.degraded {
			t.Errorf("%s: events %v, want degraded %v", c.name, rec.Strings(), c.degraded)
		}
		if want := map[bool]int64{true: 0, false: 1}[c.degraded]; handled.Load() != want {
			t.Errorf("%s: the error handler was called %d times, want %d", c.name, handled.Load(), want)
		}
		if c.limit > 0 {
			if used, err := tr.AllocationUsed(context.Background(), "k"); err != nil || used[0].Used != 1 || used[0].Rule.Limit != c.limit {
				t.Errorf("%s: degraded usage %+v, %v; want 1 used of %d", c.name, used, err, c.limit)
			}
		}
	}
	srv.Restart()
	waitRedisRedialed(t)
}

// TestDegradedShareHoldBackAndCarryOver walks one Transport through an outage of a real Redis on a manual clock:
// 20 per minute, a fleet of 4 (cache.Traits.Processes), so 5 per minute locally.
func TestDegradedShareHoldBackAndCarryOver(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	clk := clock.NewManual(t0)
	rec := &observetest.Recorder{}
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	s := rolling(t, rule)
	tr := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(fleetStore{st, 4}), ratemonitor.WithClock(clk),
		ratemonitor.WithPacing(), ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard))
	const key = "k"
	reserve := func(step string, allowed bool, wait time.Duration) {
		t.Helper()
		if got := reserveOnce(t, tr, rec, clk, key); got.allowed != allowed || got.wait != wait {
			t.Fatalf("%s: allowed %v wait %v; want allowed %v wait %v", step, got.allowed, got.wait, allowed, wait)
		}
	}
	for range 3 {
		reserve("healthy", true, 0)
	}
	srv.Stop()
	// Hold-back: the shared window may be full; the first local grant comes a window after
	// the outage was seen.
	reserve("outage seen", false, time.Minute)
	evs := rec.Events()
	if k := kinds(evs); len(k) != 1 || k[0] != "degraded" {
		t.Fatalf("events %v", rec.Strings())
	}
	if d := evs[slices.IndexFunc(evs, func(e observe.Event) bool { return e.Kind == observe.Degraded })]; d.Store != "redis" || d.Err == nil {
		t.Fatalf("Degraded event %v, want store redis with the error", d)
	}
	clk.Advance(time.Minute - time.Millisecond) // probes are due: Redis is still down
	reserve("hold-back", false, time.Millisecond)
	clk.Advance(time.Millisecond)
	for range 5 { // floor(20 × 1/4)
		reserve("local", true, 0)
	}
	reserve("local share used", false, time.Minute)
	if got := kinds(rec.Events()); len(got) != 1 {
		t.Fatalf("events %v", got)
	}

	srv.Restart() // empty: no persistence
	clk.Advance(ratemonitor.DefaultProbeInterval)
	// The probe succeeds: the 5 local grants are carried into Redis, and while settling the
	// local share still applies.
	reserve("settling, local share used", false, time.Minute-ratemonitor.DefaultProbeInterval)
	if got := usedIn(t, st, s, key); got != 5 {
		t.Errorf("carried over: Redis counts %d, want the 5 local grants", got)
	}
	evs = rec.Events()
	if k := kinds(evs); len(k) != 2 || k[1] != "recovered" {
		t.Fatalf("events %v", rec.Strings())
	}
	for _, e := range evs {
		if e.Kind == observe.Recovered && e.Wait != time.Minute+ratemonitor.DefaultProbeInterval {
			t.Fatalf("recovered after %v, want %v", e.Wait, time.Minute+ratemonitor.DefaultProbeInterval)
		}
	}
	clk.Advance(time.Minute - ratemonitor.DefaultProbeInterval)
	for range 5 { // both stores have room: granted on both
		reserve("settling", true, 0)
	}
	if got := usedIn(t, st, s, key); got != 10 {
		t.Errorf("settling: Redis counts %d, want 10", got)
	}
	reserve("settling, local share used again", false, time.Minute)
	clk.Advance(time.Minute + ratemonitor.DefaultProbeInterval) // settled: the shared store alone decides
	for range 10 {
		reserve("healthy again", true, 0)
	}
	if got := reserveOnce(t, tr, rec, clk, key); got.allowed || got.wait <= 0 {
		t.Errorf("Redis holds 20 in the window: %+v, want refused", got)
	}
}

// outageLog is the grant span of every request a fleet sent (grantedIn), in all and per
// process.
type outageLog struct {
	mu     sync.Mutex
	all    []span
	byProc [][]span
}

// sentSince reports whether every process sent a request on a grant of the kind wanted
// (local: the degraded mode's; else the shared store's) certain to come at or after from.
func (l *outageLog) sentSince(from time.Time, local bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, spans := range l.byProc {
		if !slices.ContainsFunc(spans, func(g span) bool { return g.local == local && !g.lo.Before(from) }) {
			return false
		}
	}
	return true
}

// grantBase is a process's upstream in the fleet test: it notes the span of the grant each
// request is sent on (grantedIn), then answers it (okBase, shared: the upstream).
type grantBase struct {
	up   *okBase
	log  *outageLog
	proc int
}

func (b grantBase) RoundTrip(req *http.Request) (*http.Response, error) {
	g := grantedIn(req)
	b.log.mu.Lock()
	b.log.all = append(b.log.all, g)
	b.log.byProc[b.proc] = append(b.log.byProc[b.proc], g)
	b.log.mu.Unlock()
	return b.up.RoundTrip(req)
}

// TestFleetOutageNeverOverLimit: four Transports, each with its own Redis store (four processes),
// pace 20 per second on one key with two senders each (out of phase, see below), and Redis
// is killed, then restarted empty. Across all of them, no window of 1 s holds more than 20
// grants, judged at the grants' instants (grantspan_test.go): before, during (each at its
// share after its hold-back) and after (the carry-over and the settling); the upstream sees
// at most 20 per second the outage touches. Liveness, on the real clock: Redis stays down
// until every Transport has sent on a grant of its degraded mode (4 s at least, 30 s at most),
// and after the restart every Transport sends on a grant of Redis again within 30 s. Each
// Transport reports Degraded, then Recovered, once. How many each is granted, and when, is
// TestDegradedFleetSharesTheLimit's, on a manual clock.
func TestFleetOutageNeverOverLimit(t *testing.T) {
	srv := redistest.Start(t)
	rule := strategy.Rule{Limit: 20, Window: time.Second}
	up := &okBase{}
	log := &outageLog{byProc: make([][]span, 4)}
	var trs []*ratemonitor.Transport
	var recs []*observetest.Recorder
	for i := range 4 {
		rec := &observetest.Recorder{}
		// A 5 s timeout: on a loaded machine a short one runs out now and then with Redis up,
		// which is an outage of its own (a second degraded/recovered pair). The outage here is
		// a stopped server, refused at once, whatever the timeout.
		st := newRedisStoreWith(t, srv, redisstore.Options{Timeout: 5 * time.Second})
		tr := newTransport(t, grantBase{up, log, i}, ratemonitor.WithRules(rule), ratemonitor.WithStore(grantLog{st, 4}), ratemonitor.WithPacing(),
			ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard), ratemonitor.WithClock(wakeClock{}))
		trs, recs = append(trs, tr), append(recs, rec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, tr := range trs {
		// Transport i's senders pause i × 100 ms after each request, so that the four local
		// windows are out of phase; a watcher asks WaitTime every 20 ms, so that probes (and
		// the return) come in the middle of a window, not only when a sender wakes.
		for range 2 {
			wg.Go(func() {
				for ctx.Err() == nil {
					doKey(tr, withGrantSlot(ctx), "k")
					clock.Real().Sleep(ctx, time.Duration(i)*100*time.Millisecond)
				}
			})
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				tr.WaitTime(ctx, "k", 1)
				clock.Real().Sleep(ctx, 20*time.Millisecond)
			}
		})
	}
	// until polls ok every 20 ms for up to 30 s, and fails the test (ending the run) after.
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				cancel()
				wg.Wait()
				t.Fatalf("%s: not within 30 s", what)
			}
		}
	}
	time.Sleep(1200 * time.Millisecond)
	stop := time.Now()
	srv.Stop()
	until("every Transport sending on its degraded mode's grants", func() bool { return log.sentSince(stop, true) })
	time.Sleep(time.Until(stop.Add(4 * time.Second)))
	srv.Restart()
	restart := time.Now()
	until("every Transport sending on Redis's grants again", func() bool { return log.sentSince(restart, false) })
	time.Sleep(time.Until(restart.Add(3500 * time.Millisecond)))
	cancel()
	wg.Wait()

	log.mu.Lock()
	defer log.mu.Unlock()
	if most, at := mostIn(log.all, time.Second); most > 20 {
		t.Errorf("%d grants in the second from %v (%v after the kill), limit 20", most, at.Format("15:04:05.000"), at.Sub(stop))
	}
	// The upstream's count, by arrival: at most 20 in each of the seconds the outage touches
	// (under SendUncounted, the default before, thousands).
	outage := restart.Sub(stop)
	if n, most := up.between(stop, restart), 20*(int((outage+time.Second-1)/time.Second)+1); n > most {
		t.Errorf("%d requests reached the upstream during the %v outage, want at most %d", n, outage.Round(time.Millisecond), most)
	}
	for i, rec := range recs {
		if k := kinds(rec.Events()); !slices.Equal(k, []string{"degraded", "recovered"}) {
			t.Errorf("Transport %d: events %v, want degraded then recovered once", i, k)
		}
	}
	t.Logf("%d grants in all over an outage of %v: %d in its last 2 s, %d from 1.5 s to 3.5 s after the restart", len(log.all), outage.Round(time.Millisecond),
		countIn(log.all, restart.Add(-2*time.Second), restart), countIn(log.all, restart.Add(1500*time.Millisecond), restart.Add(3500*time.Millisecond)))
}

// TestDegradedFleetSharesTheLimit: four paced Transports, each with its own Redis store (four
// processes, cache.Traits.Processes), 20 per second on one key, on one manual clock (the stores' too,
// Options.Clock, so that every grant is judged on one timeline). The fleet takes the 20 of
// the first second. Redis stops: each Transport holds back for the longest window from the
// outage it saw, then is granted its share, 5 (20 ÷ 4), in each window: 20 for the fleet.
// Redis comes back empty: each Transport's probe carries its 5 local grants into Redis, so
// Redis counts the fleet's 20 and nothing more is granted until they expire; settling, each
// is held to its share of 5 while Redis has room; settled, Redis alone decides, and one
// Transport may take all 20. No window of 1 s ever holds more than 20 grants.
func TestDegradedFleetSharesTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rule := strategy.Rule{Limit: 20, Window: time.Second}
	s := rolling(t, rule)
	var trs []*ratemonitor.Transport
	var recs []*observetest.Recorder
	var sts []*redisstore.Store
	for range 4 {
		rec := &observetest.Recorder{}
		st := newRedisStoreWith(t, srv, redisstore.Options{Clock: clk})
		tr := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(fleetStore{st, 4}), ratemonitor.WithClock(clk),
			ratemonitor.WithPacing(), ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard))
		trs, recs, sts = append(trs, tr), append(recs, rec), append(sts, st)
	}
	var grants []time.Time
	// ask makes n Reserves of one slot on each Transport in turn (the first len(granted)),
	// and checks each one's grants and, when it was refused, the wait its first refusal told.
	ask := func(step string, n int, granted []int, wait time.Duration) {
		t.Helper()
		for i, tr := range trs[:len(granted)] {
			got, told := 0, time.Duration(-1)
			for range n {
				a := reserveOnce(t, tr, recs[i], clk, "k")
				if a.allowed {
					got++
					grants = append(grants, clk.Now())
				} else if told < 0 {
					told = a.wait
				}
			}
			if got != granted[i] || got < n && told != wait {
				t.Fatalf("%s: Transport %d: granted %d of %d, first refusal's wait %v; want %d granted, then a wait of %v", step, i, got, n, told, granted[i], wait)
			}
		}
	}
	each := func(n int) []int { return []int{n, n, n, n} }
	ask("healthy", 6, []int{6, 6, 6, 2}, time.Second)
	srv.Stop()
	clk.Advance(time.Second)
	ask("the outage seen", 1, each(0), time.Second) // the hold-back: the longest window
	for i, rec := range recs {
		if k := kinds(rec.Events()); !slices.Equal(k, []string{"degraded"}) {
			t.Fatalf("Transport %d: events %v, want degraded", i, k)
		}
	}
	clk.Advance(time.Second)
	ask("degraded", 6, each(5), time.Second)
	clk.Advance(time.Second)
	ask("degraded, a window later", 6, each(5), time.Second)
	srv.Restart() // empty: no persistence
	clk.Advance(ratemonitor.DefaultProbeInterval)
	ask("back, settling: the local share used", 1, each(0), time.Second-ratemonitor.DefaultProbeInterval)
	for i, rec := range recs {
		if k := kinds(rec.Events()); !slices.Equal(k, []string{"degraded", "recovered"}) {
			t.Fatalf("Transport %d: events %v, want degraded, recovered", i, k)
		}
	}
	if n := usedIn(t, sts[0], s, "k"); n != 20 {
		t.Fatalf("Redis counts %d after the returns, want the fleet's 20 local grants carried over", n)
	}
	clk.Advance(time.Second - ratemonitor.DefaultProbeInterval)
	ask("settling: the local windows free, Redis full of the carried grants", 1, each(0), ratemonitor.DefaultProbeInterval)
	clk.Advance(ratemonitor.DefaultProbeInterval)
	ask("settling: both have room", 6, each(5), time.Second)
	clk.Advance(2 * time.Second)
	ask("settled: Redis alone decides", 21, []int{20}, time.Second)
	if most, at := mostIn(exact(grants...), time.Second); most > 20 {
		t.Errorf("%d grants in the second from %v, limit 20", most, at.Sub(t0))
	}
}

// TestDegradedPacesTheWholeLimit: one paced Transport, 20 per second, on a manual clock with
// Redis stopped. Under the default policy (Degrade), with no fleet size known, the degraded
// mode sends nothing for the hold-back (the longest window, a second), then 20 in each second
// (the whole limit): at most 40 in 2 s. Under SendUncounted (the default before issue 14)
// every request goes at once, uncounted, and nothing is reported degraded.
func TestDegradedPacesTheWholeLimit(t *testing.T) {
	srv := redistest.Start(t)
	rule := strategy.Rule{Limit: 20, Window: time.Second}
	clk := clock.NewManual(t0)
	rec := &observetest.Recorder{}
	tr := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(newRedisStore(t, srv)), ratemonitor.WithClock(clk),
		ratemonitor.WithPacing(), ratemonitor.WithLogger(discard), ratemonitor.WithObserver(rec))
	other := newRedisStore(t, srv) // for SendUncounted, below: made while Redis answers
	srv.Stop()
	reserve := func(step string, n, granted int, wait time.Duration) {
		t.Helper()
		got, told := 0, time.Duration(-1)
		for range n {
			if a := reserveOnce(t, tr, rec, clk, "k"); a.allowed {
				got++
			} else if told < 0 {
				told = a.wait
			}
		}
		if got != granted || told != wait {
			t.Fatalf("%s: granted %d of %d, first refusal's wait %v; want %d, then a wait of %v", step, got, n, told, granted, wait)
		}
	}
	reserve("the outage seen: the hold-back", 1, 0, time.Second)
	if k := kinds(rec.Events()); !slices.Equal(k, []string{"degraded"}) {
		t.Errorf("events %v, want degraded", k)
	}
	clk.Advance(time.Second)
	reserve("the first second after the hold-back", 21, 20, time.Second)
	clk.Advance(time.Second)
	reserve("the next second", 21, 20, time.Second)

	base := &clockBase{clk: clk}
	rec = &observetest.Recorder{}
	uncounted := newTransport(t, base, ratemonitor.WithRules(rule), ratemonitor.WithStore(other), ratemonitor.WithClock(clk),
		ratemonitor.WithPacing(), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted), ratemonitor.WithLogger(discard), ratemonitor.WithObserver(rec))
	for range 50 {
		if err := doKey(uncounted, context.Background(), "k"); err != nil {
			t.Fatalf("SendUncounted with Redis down: %v, want it sent", err)
		}
	}
	if sent := base.instants(); len(sent) != 50 || !sent[49].Equal(clk.Now()) {
		t.Errorf("SendUncounted: sent %d, the last at %v; want 50 at once, at %v", len(sent), sent, clk.Now())
	}
	if k := kinds(rec.Events()); len(k) != 0 {
		t.Errorf("SendUncounted: events %v, want none", k)
	}
	srv.Restart()
	waitRedisRedialed(t)
}

// TestOutageKeepsWithinLimitAndSending is issue 14's measurement, on the real clock: one paced Transport,
// 20 per second, eight senders, Redis down for 2 s. Under the default (Degrade; no fleet size
// known, so the whole limit) it reports the outage and sends at most 40 in the 2 s (the
// limit; how many, and when, is TestDegradedPacesTheWholeLimit's), and a request with time to
// wait out the hold-back is sent while Redis is still down (liveness: within 30 s). Under
// SendUncounted (the default before) every request goes, uncounted: thousands, logged only.
func TestOutageKeepsWithinLimitAndSending(t *testing.T) {
	srv := redistest.Start(t)
	rule := strategy.Rule{Limit: 20, Window: time.Second}
	for i, opts := range [][]ratemonitor.Option{nil, {ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted)}} {
		base := &okBase{}
		rec := &observetest.Recorder{}
		tr := newTransport(t, base, append([]ratemonitor.Option{ratemonitor.WithRules(rule), ratemonitor.WithStore(newRedisStore(t, srv)),
			ratemonitor.WithPacing(), ratemonitor.WithLogger(discard), ratemonitor.WithObserver(rec)}, opts...)...)
		srv.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for ctx.Err() == nil {
					doKey(tr, ctx, "k")
				}
			})
		}
		wg.Wait()
		cancel()
		n := base.count()
		policy := map[int]string{0: "default (Degrade)", 1: "SendUncounted"}[i]
		t.Logf("%s: %d requests sent in 2 s with Redis down, limit 20 per second", policy, n)
		// The default policy is Degrade: degraded mode reports the outage.
		if k := kinds(rec.Events()); i == 0 && (!slices.Equal(k, []string{"degraded"}) || n > 40) {
			t.Errorf("default policy: events %v, %d requests sent in 2 s; want degraded, at most 40", k, n)
		}
		if i == 0 {
			live, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := doKey(tr, live, "k"); err != nil {
				t.Errorf("default policy, Redis still down: a request with 30 s to wait: %v, want it sent", err)
			}
			cancel()
		}
		srv.Restart()
	}
	waitRedisRedialed(t)
}

// TestDegradedCountsEachCounterOnce: an outer paced Transport (5 per minute, app rules 3 per minute)
// wrapping an inner one (100 per hour), both over one Redis store, keep pacing with Redis
// down (no hold-back, whole limit): 3 requests go, the 4th is refused at once for its
// deadline (the app key is full), and each counter holds each request once: the degraded
// counts (AllocationUsed), the app key's wait, and, once Redis is back (restarted empty), what
// the carry-over put in each of its counters.
func TestDegradedCountsEachCounterOnce(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	base := &okBase{}
	const probe = 20 * time.Millisecond
	noHold := ratemonitor.WithDegraded(ratemonitor.DegradedConfig{NoHoldBack: true, ProbeInterval: probe})
	hour := strategy.Rule{Limit: 100, Window: time.Hour}
	five := strategy.Rule{Limit: 5, Window: time.Minute}
	three := strategy.Rule{Limit: 3, Window: time.Minute}
	inner := newTransport(t, base, ratemonitor.WithRules(hour), ratemonitor.WithStore(st), ratemonitor.WithPacing(), noHold,
		ratemonitor.WithLogger(discard))
	outer := newTransport(t, inner, ratemonitor.WithRules(five), ratemonitor.WithStore(st), ratemonitor.WithPacing(),
		ratemonitor.WithAppRules("app", three), noHold, ratemonitor.WithLogger(discard))
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for i := range 3 {
		if err := doKey(outer, ctx, "k"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	var de *ratemonitor.DeadlineError
	if err := doKey(outer, ctx, "k"); !errors.As(err, &de) {
		t.Fatalf("4th request: %v, want a *DeadlineError (app key full)", err)
	}
	if n := base.count(); n != 3 {
		t.Errorf("upstream saw %d, want 3", n)
	}
	for name, c := range map[string]struct {
		tr   *ratemonitor.Transport
		rule strategy.Rule
	}{"inner": {inner, hour}, "outer": {outer, five}} {
		if used, err := c.tr.AllocationUsed(ctx, "k"); err != nil || used[0].Used != 3 || used[0].Rule != c.rule {
			t.Errorf("%s, degraded: %+v, %v; want 3 used of %v", name, used, err, c.rule)
		}
	}
	// The key has room for 2 more; the app key has none until its 3 expire, a minute after
	// they were granted.
	if wait, err := outer.WaitTime(ctx, "k", 1); err != nil || wait <= time.Minute-time.Since(start) || wait > time.Minute {
		t.Errorf("outer WaitTime while degraded: %v, %v; want the app key's, under a minute", wait, err)
	}
	srv.Restart()
	time.Sleep(probe)
	for _, tr := range []*ratemonitor.Transport{inner, outer} {
		if _, err := tr.AllocationUsed(ctx, "k"); err != nil { // probes: back, the counts carried over
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		s   *engine.Strategy
		key string
	}{"inner": {rolling(t, hour), "k"}, "outer": {rolling(t, five), "k"}, "app": {rolling(t, three), "app"}} {
		if n := usedIn(t, st, c.s, c.key); n != 3 {
			t.Errorf("%s: Redis counts %d carried over, want 3", name, n)
		}
	}
	waitRedisRedialed(t)
}

// TestClosedStoreIsNotAnOutage: a closed store is not an outage: under Degrade nothing is sent, the
// error is a *StoreError, and the Transport does not degrade.
func TestClosedStoreIsNotAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	st.Close()
	rec := &observetest.Recorder{}
	base := &okBase{}
	tr := newTransport(t, base, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithPacing(),
		ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard))
	var se *ratemonitor.StoreError
	if err := doKey(tr, context.Background(), "k"); !errors.As(err, &se) || !errors.Is(err, cache.ErrClosed) || base.count() != 0 {
		t.Errorf("closed store: %v, sent %d", err, base.count())
	}
	if k := kinds(rec.Events()); len(k) != 0 {
		t.Errorf("events %v, want none", k)
	}
}

// TestDegradedShareAppliesCloseStopsMemory: an explicit share applies (Share 0.5 of 20: 10), a burst above
// the share is refused as too large while degraded, and Close stops the memory store the
// outage started: no goroutine is left.
func TestDegradedShareAppliesCloseStopsMemory(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	before := goleak.IgnoreCurrent()
	tr, err := ratemonitor.New(&okBase{}, ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), ratemonitor.WithStore(fleetStore{st, 4}),
		ratemonitor.WithPacing(), ratemonitor.WithDegraded(ratemonitor.DegradedConfig{Share: 0.5, NoHoldBack: true}), ratemonitor.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx := context.Background()
	r, err := tr.Reserve(ctx, "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	if r.Remaining() != 10 {
		t.Errorf("remaining %d", r.Remaining())
	}
	if _, err := tr.Reserve(ctx, "k", 11); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("a burst of 11 over a share of 10: %v", err)
	}
	if used, err := tr.AllocationUsed(ctx, "k"); err != nil || used[0].Used != 10 || used[0].Rule.Limit != 10 {
		t.Errorf("allocation used while degraded: %+v, %v", used, err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
	if _, err := tr.Reserve(ctx, "k", 1); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	goleak.VerifyNone(t, before)
}

// TestSettlingHoldsShareUntilFleetReturns: two processes (Transports with their own Redis stores, a fleet of 2:
// 10 of 20 per minute each while degraded) both use their share during an outage. Redis comes
// back; A sees it first and carries its 10 grants into Redis, which then counts 10 of 20. B,
// still degraded, holds 10 more that Redis does not know of: were A to go by Redis alone it
// would be granted 10 more, 30 in the window. Settling holds A to its share until B has had
// time to return too; B's return carries its 10, and Redis is full.
func TestSettlingHoldsShareUntilFleetReturns(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	s := rolling(t, rule)
	st := newRedisStore(t, srv)
	recA, recB := &observetest.Recorder{}, &observetest.Recorder{}
	a := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(fleetStore{st, 2}), ratemonitor.WithClock(clk),
		ratemonitor.WithPacing(), ratemonitor.WithObserver(recA), ratemonitor.WithLogger(discard))
	b := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(fleetStore{newRedisStore(t, srv), 2}), ratemonitor.WithClock(clk),
		ratemonitor.WithPacing(), ratemonitor.WithObserver(recB), ratemonitor.WithLogger(discard))
	grants := func(tr *ratemonitor.Transport, rec *observetest.Recorder, n int) int {
		got := 0
		for range n {
			if reserveOnce(t, tr, rec, clk, "k").allowed {
				got++
			}
		}
		return got
	}
	srv.Stop()
	if grants(a, recA, 1)+grants(b, recB, 1) != 0 { // the outage is seen; hold-back
		t.Fatal("granted during the hold-back")
	}
	clk.Advance(time.Minute)
	if ga, gb := grants(a, recA, 11), grants(b, recB, 11); ga != 10 || gb != 10 {
		t.Fatalf("degraded: A granted %d, B %d; want 10 each", ga, gb)
	}
	srv.Restart()
	clk.Advance(ratemonitor.DefaultProbeInterval)
	if g := grants(a, recA, 10); g != 0 || usedIn(t, st, s, "k") != 10 {
		t.Fatalf("A back, B still degraded: A granted %d more (want 0), Redis counts %d (want A's 10)", g, usedIn(t, st, s, "k"))
	}
	if k := kinds(recB.Events()); !slices.Equal(k, []string{"degraded"}) {
		t.Fatalf("B's events %v, want degraded only (B has not asked since Redis returned)", k)
	}
	if g := grants(b, recB, 1); g != 0 || usedIn(t, st, s, "k") != 20 {
		t.Fatalf("B back: granted %d (want 0), Redis counts %d (want 20)", g, usedIn(t, st, s, "k"))
	}
	// The local windows free a minute after the grants, but Redis (on its own clock) still
	// counts the 20 carried over: nothing is granted.
	clk.Advance(time.Minute)
	if g := grants(a, recA, 1) + grants(b, recB, 1); g != 0 {
		t.Fatalf("granted %d with Redis full", g)
	}
}

// TestBlipCostsOneProbeInterval: a store that is back after a moment costs a paced request about one
// ProbeInterval, not the hold-back's whole window: while degraded a caller sleeps at most
// ProbeInterval between asks, and once the store answers, the shared store (and the share)
// decide, without the hold-back.
func TestBlipCostsOneProbeInterval(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observetest.Recorder{}
	base := &clockBase{clk: clk}
	tr := newTransport(t, base, ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), ratemonitor.WithStore(newRedisStore(t, srv)),
		ratemonitor.WithClock(clk), ratemonitor.WithPacing(), ratemonitor.WithObserver(rec), ratemonitor.WithLogger(discard))
	srv.Stop()
	done := make(chan error)
	go func() { done <- doKey(tr, context.Background(), "k") }()
	for clk.Sleepers() != 1 { // told to wait out the hold-back (a minute); sleeping 500 ms
		time.Sleep(time.Millisecond)
	}
	srv.Restart()
	clk.Advance(ratemonitor.DefaultProbeInterval)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sent := base.instants(); len(sent) != 1 || !sent[0].Equal(t0.Add(ratemonitor.DefaultProbeInterval)) {
		t.Errorf("sent at %v, want once at t0+%v", sent, ratemonitor.DefaultProbeInterval)
	}
	evs := rec.Events()
	if k := kinds(evs); !slices.Equal(k, []string{"degraded", "recovered"}) {
		t.Errorf("events %v", rec.Strings())
	}
	for _, e := range evs {
		if e.Kind == observe.Recovered && e.Wait != ratemonitor.DefaultProbeInterval {
			t.Errorf("recovered after %v, want %v", e.Wait, ratemonitor.DefaultProbeInterval)
		}
	}
}

// TestCancelAfterReturnKeepsCarriedSlots: slots reserved on the memory store while degraded, and
// given back once the Transport is on the shared store again, are not given back there: their
// instant is the memory store's, and releasing it in Redis would take back the grants carried
// over at about that instant (on the real clock, the same bucket). They stay counted until
// they expire.
func TestCancelAfterReturnKeepsCarriedSlots(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	const probe = 20 * time.Millisecond
	rec := &observetest.Recorder{}
	tr := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(st), ratemonitor.WithPacing(),
		ratemonitor.WithDegraded(ratemonitor.DegradedConfig{NoHoldBack: true, ProbeInterval: probe}), ratemonitor.WithObserver(rec),
		ratemonitor.WithLogger(discard))
	ctx := context.Background()
	srv.Stop()
	r, err := tr.Reserve(ctx, "k", 3)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	time.Sleep(probe)
	if _, err := tr.AllocationUsed(ctx, "k"); err != nil { // probes: back, 3 carried over
		t.Fatal(err)
	}
	// Back on the shared store (settling: it lasts a minute and more).
	if k := kinds(rec.Events()); !slices.Equal(k, []string{"degraded", "recovered"}) {
		t.Fatalf("events %v, want degraded then recovered", rec.Strings())
	}
	if err := r.Cancel(ctx); err != nil || r.Remaining() != 0 {
		t.Fatalf("cancel: %v, %d left", err, r.Remaining())
	}
	if n := usedIn(t, st, rolling(t, rule), "k"); n != 3 {
		t.Errorf("Redis counts %d; want the 3 carried over, kept", n)
	}
}

// TestDegradedMonitoringRecordsAndCarries: a monitoring Transport that chooses the policy (WithDegraded) records
// on the memory store while Redis is down (monitoring sends every request), and carries the
// records into Redis when it is back.
func TestDegradedMonitoringRecordsAndCarries(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	clk := clock.NewManual(t0)
	base := &clockBase{clk: clk}
	tr := newTransport(t, base, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithClock(clk),
		ratemonitor.WithDegraded(ratemonitor.DegradedConfig{Processes: 2}), ratemonitor.WithLogger(discard))
	ctx := context.Background()
	srv.Stop()
	for range 3 {
		if err := doKey(tr, ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if used, err := tr.AllocationUsed(ctx, "k"); err != nil || used[0].Used != 3 || used[0].Rule.Limit != 30 {
		t.Errorf("degraded: %+v, %v; want 3 used of 30 (60 ÷ 2)", used, err)
	}
	srv.Restart()
	clk.Advance(ratemonitor.DefaultProbeInterval)
	if used, err := tr.AllocationUsed(ctx, "k"); err != nil || used[0].Used != 3 || used[0].Rule != minute {
		t.Errorf("back: %+v, %v; want Redis's 3 used of 60", used, err)
	}
	if n := len(base.instants()); n != 3 {
		t.Errorf("sent %d, want 3", n)
	}
}

// hookStore is a real Redis store that calls onRecord before each Record.
type hookStore struct {
	*redisstore.Store
	onRecord func()
}

func (h hookStore) Record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	if h.onRecord != nil {
		h.onRecord()
	}
	return h.Store.Record(ctx, s, key, n)
}

// TestGrantDuringCarryIsCarried: a local grant made by another caller while the probing caller
// carries the earlier ones into Redis is carried too (the carry after the switch).
func TestGrantDuringCarryIsCarried(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	clk := clock.NewManual(t0)
	var tr *ratemonitor.Transport
	// A refused Reserve would sleep on the manual clock: the timeout makes that a failure in
	// seconds rather than a hang until the test binary's.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hooked := false
	hs := hookStore{Store: st, onRecord: func() {
		if hooked {
			return
		}
		hooked = true
		// Another caller, while the carry is under way: still degraded, served locally (no
		// hold-back: granted at once, or Reserve would sleep on the manual clock).
		if _, err := tr.Reserve(ctx, "k", 1); err != nil {
			t.Errorf("reserve during the carry: %v", err)
		}
	}}
	rec := &observetest.Recorder{}
	tr = newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(hs), ratemonitor.WithClock(clk),
		ratemonitor.WithPacing(), ratemonitor.WithDegraded(ratemonitor.DegradedConfig{NoHoldBack: true}), ratemonitor.WithObserver(rec),
		ratemonitor.WithLogger(discard))
	srv.Stop()
	for range 2 {
		if _, err := tr.Reserve(ctx, "k", 1); err != nil {
			t.Fatalf("degraded: %v", err)
		}
	}
	srv.Restart()
	clk.Advance(ratemonitor.DefaultProbeInterval)
	if _, err := tr.Reserve(ctx, "k", 1); err != nil { // probes, carries, settles
		t.Fatalf("back: %v", err)
	}
	if !hooked {
		t.Fatal("no carry into Redis")
	}
	granted := 0
	for _, e := range rec.Events() {
		if e.Kind == observe.Granted {
			granted++
		}
	}
	if granted != 4 || !slices.Equal(kinds(rec.Events()), []string{"degraded", "recovered"}) {
		t.Errorf("events %v, want 4 granted, degraded then recovered", rec.Strings())
	}
	if n := usedIn(t, st, rolling(t, rule), "k"); n != 4 {
		t.Errorf("Redis counts %d; want 4 (2 carried, 1 granted during the carry, 1 settling)", n)
	}
}

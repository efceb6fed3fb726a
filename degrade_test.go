package ratemonitor

import (
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// fleetStore is a real Redis store that says how many processes share it (cache.Fleet), as
// the Redis store's heartbeat will.
type fleetStore struct {
	*redisstore.Store
	n int
}

func (f fleetStore) Processes() int { return f.n }

func newRedisStore(t *testing.T, srv *redistest.Server) *redisstore.Store {
	t.Helper()
	return newRedisStoreWith(t, srv, redisstore.Options{})
}

// newRedisStoreWith is newRedisStore with options.
func newRedisStoreWith(t *testing.T, srv *redistest.Server, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// kinds returns the Degraded and Recovered events among evs, as strings.
func kinds(evs []observe.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == observe.Degraded || e.Kind == observe.Recovered {
			out = append(out, e.Kind.String())
		}
	}
	return out
}

func TestDegradeConfig(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	bad := map[string][]Option{
		"share above 1":         {WithDegraded(DegradedConfig{Share: 1.5})},
		"share negative":        {WithDegraded(DegradedConfig{Share: -0.25})},
		"share NaN":             {WithDegraded(DegradedConfig{Share: math.NaN()})},
		"processes negative":    {WithDegraded(DegradedConfig{Processes: -2})},
		"share and processes":   {WithDegraded(DegradedConfig{Share: 0.5, Processes: 2})},
		"negative probe":        {WithDegraded(DegradedConfig{ProbeInterval: -time.Second})},
		"degraded, fail open":   {WithDegraded(DegradedConfig{}), WithStoreErrorPolicy(SendUncounted)},
		"fail closed, degraded": {WithStoreErrorPolicy(SendNothing), WithDegraded(DegradedConfig{})},
		"unknown policy":        {WithStoreErrorPolicy(Degrade + 1)},
	}
	for name, opts := range bad {
		if tr, err := New(nil, append([]Option{WithRules(minute), WithStore(st), WithPacing()}, opts...)...); err == nil {
			tr.Close()
			t.Errorf("%s: New accepted it", name)
		}
	}
	// Defaults: Degrade for paced Transports, SendUncounted for monitoring ones; WithDegraded
	// chooses Degrade; explicit policies stay.
	for _, c := range []struct {
		name string
		opts []Option
		want StoreErrorPolicy
		deg  bool
	}{
		{"paced", []Option{WithPacing()}, Degrade, true},
		{"monitoring", nil, SendUncounted, false},
		{"monitoring, WithDegraded", []Option{WithDegraded(DegradedConfig{Processes: 3})}, Degrade, true},
		{"paced, fail open", []Option{WithPacing(), WithStoreErrorPolicy(SendUncounted)}, SendUncounted, false},
		{"paced, fail closed", []Option{WithPacing(), WithStoreErrorPolicy(SendNothing)}, SendNothing, false},
	} {
		tr := newTransport(t, nil, append([]Option{WithRules(minute), WithStore(st)}, c.opts...)...)
		if tr.policy != c.want || (tr.deg != nil) != c.deg {
			t.Errorf("%s: policy %v, degrader %v; want %v, %v", c.name, tr.policy, tr.deg != nil, c.want, c.deg)
		}
	}
	// Over an in-process store there is nothing to degrade from.
	if tr := newTransport(t, nil, WithRules(minute), WithPacing()); tr.policy != Degrade || tr.deg != nil {
		t.Errorf("memory store: policy %v, degrader %v", tr.policy, tr.deg != nil)
	}
}

// TestDegradeMath walks one Transport through an outage of a real Redis on a manual clock:
// 20 per minute, a fleet of 4 (cache.Fleet), so 5 per minute locally.
func TestDegradeMath(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	clk := clock.NewManual(t0)
	rec := &observe.Recorder{}
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	tr := newTransport(t, nil, WithRules(rule), WithStore(fleetStore{st, 4}), WithClock(clk), WithPacing(),
		WithObserver(rec), WithLogger(discard))
	ctx := context.Background()
	const key = "k"
	reserve := func(step string, allowed bool, wait time.Duration) {
		t.Helper()
		res, err := tr.ops.Reserve(ctx, tr.strat, key, 1)
		if err != nil || res.Allowed != allowed || res.Wait != wait {
			t.Fatalf("%s: allowed %v wait %v err %v; want allowed %v wait %v", step, res.Allowed, res.Wait, err, allowed, wait)
		}
	}
	shared := func() int {
		t.Helper()
		snap, err := st.Peek(ctx, tr.strat, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Usage[0].Used
	}
	for range 3 {
		reserve("healthy", true, 0)
	}
	srv.Stop()
	// Hold-back: the shared window may be full; the first local grant comes a window after
	// the outage was seen.
	reserve("outage seen", false, time.Minute)
	evs := rec.Events()
	if k := kinds(evs); len(k) != 1 || k[0] != "degraded" || evs[len(evs)-1].Store != "redis" || evs[len(evs)-1].Err == nil {
		t.Fatalf("events %v", rec.Strings())
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
	clk.Advance(DefaultProbeInterval)
	// The probe succeeds: the 5 local grants are carried into Redis, and while settling the
	// local share still applies.
	reserve("settling, local share used", false, time.Minute-DefaultProbeInterval)
	if got := shared(); got != 5 {
		t.Errorf("carried over: Redis counts %d, want the 5 local grants", got)
	}
	evs = rec.Events()
	if k := kinds(evs); len(k) != 2 || k[1] != "recovered" || evs[len(evs)-1].Wait != time.Minute+DefaultProbeInterval {
		t.Fatalf("events %v", rec.Strings())
	}
	clk.Advance(time.Minute - DefaultProbeInterval)
	for range 5 { // both stores have room: granted on both
		reserve("settling", true, 0)
	}
	if got := shared(); got != 10 {
		t.Errorf("settling: Redis counts %d, want 10", got)
	}
	reserve("settling, local share used again", false, time.Minute)
	clk.Advance(time.Minute + DefaultProbeInterval) // settled: the shared store alone decides
	for range 10 {
		reserve("healthy again", true, 0)
	}
	if res, err := tr.ops.Reserve(ctx, tr.strat, key, 1); err != nil || res.Allowed {
		t.Errorf("Redis holds 20 in the window: %+v, %v", res, err)
	}
}

// atLog records the instant of every reserve granted through a Transport's store
// operations: the store's own instant (Redis TIME, or the memory store's clock while
// degraded), the instant the rules are enforced at.
type atLog struct {
	cache.Store
	mu  *sync.Mutex
	ats *[]time.Time
}

func (g atLog) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := g.Store.Reserve(ctx, s, key, n)
	if err == nil && res.Allowed {
		g.mu.Lock()
		for range n {
			*g.ats = append(*g.ats, res.At)
		}
		g.mu.Unlock()
	}
	return res, err
}

// maxIn returns the most instants of ats in any window [s, s+w) starting at one of them.
func maxIn(ats []time.Time, w time.Duration) (most int, at time.Time) {
	sorted := slices.SortedFunc(slices.Values(ats), func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range sorted {
		for j < len(sorted) && sorted[j].Before(sorted[i].Add(w)) {
			j++
		}
		if j-i > most {
			most, at = j-i, sorted[i]
		}
	}
	return most, at
}

// TestDegradeFleetOutage: four Transports, each with its own Redis store (four processes),
// pace 20 per second on one key with two senders each (out of phase, see below), and Redis
// is killed for 4 s then restarted empty. Across all of them, at every grant instant (the
// store's: Redis TIME, or the memory store's clock while degraded), no window of 1 s holds
// more than 20 grants: before, during (each at 5 per second after its hold-back) and after
// (the carry-over and the settling); the upstream sees at most 20 per second of the outage.
// They keep sending: once the hold-back has passed (2 s after the kill at most: a sender may
// sleep up to 1 s before it meets the outage, then holds back 1 s), at least 15 in 2 s
// (3/8 of the limit's rate; 5 per process and window would give 40, less slots that free up
// to one 1 s bucket late and the slowest senders' pauses), and as many in the 2 s from 1.5 s
// after the restart. Each Transport reports Degraded, then Recovered, once.
func TestDegradeFleetOutage(t *testing.T) {
	srv := redistest.Start(t)
	rule := strategy.Rule{Limit: 20, Window: time.Second}
	var mu sync.Mutex
	var ats []time.Time
	var trs []*Transport
	var recs []*observe.Recorder
	base := &okBase{}
	for range 4 {
		rec := &observe.Recorder{}
		// A 1 s timeout: on a loaded machine the default 100 ms ran out now and then with
		// Redis up, which is an outage of its own (a second degraded/recovered pair). The
		// outage here is a stopped server, refused at once, whatever the timeout.
		st := newRedisStoreWith(t, srv, redisstore.Options{Timeout: time.Second})
		tr := newTransport(t, base, WithRules(rule), WithStore(fleetStore{st, 4}), WithPacing(),
			WithObserver(rec), WithLogger(discard))
		tr.ops = atLog{Store: tr.ops, mu: &mu, ats: &ats}
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
					doKey(tr, ctx, "k")
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
	time.Sleep(1200 * time.Millisecond)
	stop := time.Now()
	srv.Stop()
	time.Sleep(4 * time.Second)
	srv.Restart()
	restart := time.Now()
	time.Sleep(3500 * time.Millisecond)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if most, at := maxIn(ats, time.Second); most > 20 {
		t.Errorf("%d grants in the second from %v (%v after the kill), limit 20", most, at.Format("15:04:05.000"), at.Sub(stop))
	}
	during, after := 0, 0
	for _, at := range ats {
		switch {
		case !at.Before(stop.Add(2*time.Second)) && at.Before(restart):
			during++
		case !at.Before(restart.Add(1500*time.Millisecond)) && at.Before(restart.Add(3500*time.Millisecond)):
			after++
		}
	}
	// The upstream's count, by arrival: at most 20 in each of the 5 seconds the 4 s outage
	// touches (under SendUncounted, the default before, thousands).
	if n := base.between(stop, restart); n > 100 {
		t.Errorf("%d requests reached the upstream during the 4 s outage, want at most 100", n)
	}
	if during < 15 {
		t.Errorf("%d grants in the last 2 s of the outage, want at least 15", during)
	}
	if after < 15 {
		t.Errorf("%d grants from 1.5 s to 3.5 s after the restart, want at least 15", after)
	}
	for i, rec := range recs {
		if k := kinds(rec.Events()); !slices.Equal(k, []string{"degraded", "recovered"}) {
			t.Errorf("Transport %d: events %v, want degraded then recovered once", i, k)
		}
	}
	t.Logf("%d grants in all: %d in the last 2 s of the outage, %d from 1.5 s to 3.5 s after the restart", len(ats), during, after)
	if os.Getenv("DEBUG_DEGRADE") != "" {
		for _, a := range slices.SortedFunc(slices.Values(ats), func(a, b time.Time) int { return a.Compare(b) }) {
			if a.After(restart.Add(-time.Second)) {
				t.Log(a.Sub(restart))
			}
		}
	}
}

// okBase answers every request with 200 at once, and notes when each arrived.
type okBase struct {
	mu   sync.Mutex
	sent []time.Time
}

func (b *okBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.sent = append(b.sent, time.Now())
	b.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// between counts the requests that arrived in [from, to).
func (b *okBase) between(from, to time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.sent {
		if !s.Before(from) && s.Before(to) {
			n++
		}
	}
	return n
}

// TestDegradeOutageFigure is issue 14's measurement: one paced Transport, 20 per second, eight
// senders, Redis down for 2 s. Under the default (Degrade; no fleet size known, so the whole
// limit) it sends nothing for the hold-back's second, then 20: at most 40 in 2 s. Under
// SendUncounted (the default before) every request goes, uncounted: thousands, logged only.
func TestDegradeOutageFigure(t *testing.T) {
	srv := redistest.Start(t)
	rule := strategy.Rule{Limit: 20, Window: time.Second}
	for i, opts := range [][]Option{nil, {WithStoreErrorPolicy(SendUncounted)}} {
		base := &okBase{}
		tr := newTransport(t, base, append([]Option{WithRules(rule), WithStore(newRedisStore(t, srv)), WithPacing(), WithLogger(discard)}, opts...)...)
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
		n := len(base.sent)
		t.Logf("%v: %d requests sent in 2 s with Redis down, limit 20 per second", tr.policy, n)
		if i == 0 && (tr.policy != Degrade || n < 20 || n > 40) {
			t.Errorf("default policy %v: %d requests sent in 2 s, want degrade, 20 to 40", tr.policy, n)
		}
		srv.Restart()
	}
	waitRedisRedialed(t)
}

// waitRedisRedialed waits until go-redis's pools have dialled a restarted server: a pool
// whose dials all failed starts a goroutine (ConnPool.tryDial, go-redis v9.23.0
// internal/pool/pool.go) that tries again every second until one succeeds, which goleak
// would see if the test ended first.
func waitRedisRedialed(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "ConnPool).tryDial") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("go-redis still redials the restarted server after 5 s")
		}
	}
}

// TestDegradeAppAndStacked: an outer paced Transport (5 per minute, app rules 3 per minute)
// wrapping an inner one (100 per hour), both over one Redis store, keep pacing with Redis
// down (no hold-back, whole limit): 3 requests go, the 4th is refused at once for its
// deadline (the app key is full), and each counter holds each request once.
func TestDegradeAppAndStacked(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	base := &okBase{}
	noHold := WithDegraded(DegradedConfig{NoHoldBack: true})
	hour := strategy.Rule{Limit: 100, Window: time.Hour}
	inner := newTransport(t, base, WithRules(hour), WithStore(st), WithPacing(), noHold, WithLogger(discard))
	outer := newTransport(t, inner, WithRules(strategy.Rule{Limit: 5, Window: time.Minute}), WithStore(st), WithPacing(),
		WithAppRules("app", strategy.Rule{Limit: 3, Window: time.Minute}), noHold, WithLogger(discard))
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		if err := doKey(outer, ctx, "k"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	var de *DeadlineError
	if err := doKey(outer, ctx, "k"); !errors.As(err, &de) {
		t.Fatalf("4th request: %v, want a *DeadlineError (app key full)", err)
	}
	if n := len(base.sent); n != 3 {
		t.Errorf("upstream saw %d, want 3", n)
	}
	for name, c := range map[string]struct {
		tr       *Transport
		s        *engine.Strategy
		key      string
		wantRule strategy.Rule
	}{
		"inner": {inner, inner.strat, "k", hour},
		"outer": {outer, outer.strat, "k", strategy.Rule{Limit: 5, Window: time.Minute}},
		"app":   {outer, outer.app.strat, "app", strategy.Rule{Limit: 3, Window: time.Minute}},
	} {
		snap, err := c.tr.ops.Peek(ctx, c.s, c.key, 0)
		if err != nil || snap.Usage[0].Used != 3 || snap.Usage[0].Rule != c.wantRule {
			t.Errorf("%s: %+v, %v; want 3 used of %v", name, snap.Usage, err, c.wantRule)
		}
	}
}

// TestDegradeClosedStore: a closed store is not an outage: under Degrade nothing is sent, the
// error is a *StoreError, and the Transport does not degrade.
func TestDegradeClosedStore(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	st.Close()
	rec := &observe.Recorder{}
	base := &okBase{}
	tr := newTransport(t, base, WithRules(minute), WithStore(st), WithPacing(), WithObserver(rec), WithLogger(discard))
	var se *StoreError
	if err := doKey(tr, context.Background(), "k"); !errors.As(err, &se) || !errors.Is(err, cache.ErrClosed) || len(base.sent) != 0 {
		t.Errorf("closed store: %v, sent %d", err, len(base.sent))
	}
	if k := kinds(rec.Events()); len(k) != 0 {
		t.Errorf("events %v, want none", k)
	}
}

// TestDegradeShareAndClose: an explicit share applies (Share 0.5 of 20: 10), a burst above
// the share is refused as too large while degraded, and Close stops the memory store the
// outage started: no goroutine is left.
func TestDegradeShareAndClose(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	before := goleak.IgnoreCurrent()
	tr, err := New(&okBase{}, WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), WithStore(fleetStore{st, 4}),
		WithPacing(), WithDegraded(DegradedConfig{Share: 0.5, NoHoldBack: true}), WithLogger(discard))
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

// TestDegradeSettling: two processes (Transports with their own Redis stores, a fleet of 2:
// 10 of 20 per minute each while degraded) both use their share during an outage. Redis comes
// back; A sees it first and carries its 10 grants into Redis, which then counts 10 of 20. B,
// still degraded, holds 10 more that Redis does not know of: were A to go by Redis alone it
// would be granted 10 more, 30 in the window. Settling holds A to its share until B has had
// time to return too; B's return carries its 10, and Redis is full.
func TestDegradeSettling(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	st := newRedisStore(t, srv)
	a := newTransport(t, nil, WithRules(rule), WithStore(fleetStore{st, 2}), WithClock(clk), WithPacing(), WithLogger(discard))
	b := newTransport(t, nil, WithRules(rule), WithStore(fleetStore{newRedisStore(t, srv), 2}), WithClock(clk), WithPacing(), WithLogger(discard))
	ctx := context.Background()
	grants := func(tr *Transport, n int) int {
		got := 0
		for range n {
			if res, err := tr.ops.Reserve(ctx, tr.strat, "k", 1); err != nil {
				t.Fatal(err)
			} else if res.Allowed {
				got++
			}
		}
		return got
	}
	shared := func() int {
		snap, err := st.Peek(ctx, a.strat, "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Usage[0].Used
	}
	srv.Stop()
	if grants(a, 1)+grants(b, 1) != 0 { // the outage is seen; hold-back
		t.Fatal("granted during the hold-back")
	}
	clk.Advance(time.Minute)
	if ga, gb := grants(a, 11), grants(b, 11); ga != 10 || gb != 10 {
		t.Fatalf("degraded: A granted %d, B %d; want 10 each", ga, gb)
	}
	srv.Restart()
	clk.Advance(DefaultProbeInterval)
	if g := grants(a, 10); g != 0 || shared() != 10 {
		t.Fatalf("A back, B still degraded: A granted %d more (want 0), Redis counts %d (want A's 10)", g, shared())
	}
	if g := grants(b, 1); g != 0 || shared() != 20 {
		t.Fatalf("B back: granted %d (want 0), Redis counts %d (want 20)", g, shared())
	}
	// The local windows free a minute after the grants, but Redis (on its own clock) still
	// counts the 20 carried over: nothing is granted.
	clk.Advance(time.Minute)
	if g := grants(a, 1) + grants(b, 1); g != 0 {
		t.Fatalf("granted %d with Redis full", g)
	}
}

// TestDegradeBlip: a store that is back after a moment costs a paced request about one
// ProbeInterval, not the hold-back's whole window: while degraded a caller sleeps at most
// ProbeInterval between asks, and once the store answers, the shared store (and the share)
// decide, without the hold-back.
func TestDegradeBlip(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	rec := &observe.Recorder{}
	base := &clockBase{clk: clk}
	tr := newTransport(t, base, WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), WithStore(newRedisStore(t, srv)),
		WithClock(clk), WithPacing(), WithObserver(rec), WithLogger(discard))
	srv.Stop()
	done := make(chan error)
	go func() { done <- doKey(tr, context.Background(), "k") }()
	for clk.Sleepers() != 1 { // told to wait out the hold-back (a minute); sleeping 500 ms
		time.Sleep(time.Millisecond)
	}
	srv.Restart()
	clk.Advance(DefaultProbeInterval)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(base.sent) != 1 || !base.sent[0].Equal(t0.Add(DefaultProbeInterval)) {
		t.Errorf("sent at %v, want once at t0+%v", base.sent, DefaultProbeInterval)
	}
	evs := rec.Events()
	if k := kinds(evs); !slices.Equal(k, []string{"degraded", "recovered"}) {
		t.Errorf("events %v", rec.Strings())
	}
	for _, e := range evs {
		if e.Kind == observe.Recovered && e.Wait != DefaultProbeInterval {
			t.Errorf("recovered after %v, want %v", e.Wait, DefaultProbeInterval)
		}
	}
}

// TestDegradeCancelAcrossSwitch: slots reserved on the memory store while degraded, and
// given back once the Transport is on the shared store again, are not given back there: their
// instant is the memory store's, and releasing it in Redis would take back the grants carried
// over at about that instant (on the real clock, the same bucket). They stay counted until
// they expire.
func TestDegradeCancelAcrossSwitch(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	const probe = 20 * time.Millisecond
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), WithStore(st),
		WithPacing(), WithDegraded(DegradedConfig{NoHoldBack: true, ProbeInterval: probe}), WithLogger(discard))
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
	if tr.deg.state != settling {
		t.Fatalf("state %d, want settling", tr.deg.state)
	}
	if err := r.Cancel(ctx); err != nil || r.Remaining() != 0 {
		t.Fatalf("cancel: %v, %d left", err, r.Remaining())
	}
	snap, err := st.Peek(ctx, tr.strat, "k", 0)
	if err != nil || snap.Usage[0].Used != 3 {
		t.Errorf("Redis counts %+v, %v; want the 3 carried over, kept", snap.Usage, err)
	}
}

// TestDegradeMonitoring: a monitoring Transport that chooses the policy (WithDegraded) records
// on the memory store while Redis is down (monitoring sends every request), and carries the
// records into Redis when it is back.
func TestDegradeMonitoring(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	clk := clock.NewManual(t0)
	base := &clockBase{clk: clk}
	tr := newTransport(t, base, WithRules(minute), WithStore(st), WithClock(clk), WithDegraded(DegradedConfig{Processes: 2}),
		WithLogger(discard))
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
	clk.Advance(DefaultProbeInterval)
	if used, err := tr.AllocationUsed(ctx, "k"); err != nil || used[0].Used != 3 || used[0].Rule != minute {
		t.Errorf("back: %+v, %v; want Redis's 3 used of 60", used, err)
	}
	if len(base.sent) != 3 {
		t.Errorf("sent %d, want 3", len(base.sent))
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

// TestDegradeCarryInFlight: a local grant made by another caller while the probing caller
// carries the earlier ones into Redis is carried too (the carry after the switch).
func TestDegradeCarryInFlight(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	clk := clock.NewManual(t0)
	var tr *Transport
	ctx := context.Background()
	hooked := false
	hs := hookStore{Store: st, onRecord: func() {
		if hooked {
			return
		}
		hooked = true
		// Another caller, while the carry is under way: still degraded, served locally.
		if res, err := tr.ops.Reserve(ctx, tr.strat, "k", 1); err != nil || !res.Allowed {
			t.Errorf("reserve during the carry: %+v, %v", res, err)
		}
	}}
	tr = newTransport(t, nil, WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), WithStore(hs), WithClock(clk),
		WithPacing(), WithDegraded(DegradedConfig{NoHoldBack: true}), WithLogger(discard))
	srv.Stop()
	for range 2 {
		if res, err := tr.ops.Reserve(ctx, tr.strat, "k", 1); err != nil || !res.Allowed {
			t.Fatalf("degraded: %+v, %v", res, err)
		}
	}
	srv.Restart()
	clk.Advance(DefaultProbeInterval)
	if res, err := tr.ops.Reserve(ctx, tr.strat, "k", 1); err != nil || !res.Allowed { // probes, carries, settles
		t.Fatalf("back: %+v, %v", res, err)
	}
	snap, err := st.Peek(ctx, tr.strat, "k", 0)
	if err != nil || snap.Usage[0].Used != 4 {
		t.Errorf("Redis counts %+v, %v; want 4 (2 carried, 1 granted during the carry, 1 settling)", snap.Usage, err)
	}
}

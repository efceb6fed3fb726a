package transporttest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestInFlightSharedAcrossProcessesOverRedis: two Transports over their own Store values on one Redis server, as
// two processes would be, share WithInFlight(3): 16 goroutines × 5 paced requests, and the
// upstream never sees more than 3 at once.
func TestInFlightSharedAcrossProcessesOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	up, _, most := upstreamtest.InFlight(t)
	rules := ratemonitor.WithRules(strategy.Rule{Limit: 1000, Window: time.Minute})
	a := newTransport(t, nil, rules, ratemonitor.WithStore(leaseStore(t, srv)), ratemonitor.WithPacing(), ratemonitor.WithInFlight(3))
	b := newTransport(t, nil, rules, ratemonitor.WithStore(leaseStore(t, srv)), ratemonitor.WithPacing(), ratemonitor.WithInFlight(3))
	upstreamtest.ConcurrentRun(t, []*ratemonitor.Transport{a, b}, up.URL, 16, 5)
	if m := most.Load(); m > 3 || m < 1 {
		t.Errorf("the upstream saw %d in flight at most, want 1..3", m)
	}
}

// TestCrashedInFlightLeaseFreesAfterTTL: on Redis TIME with a 1 s lease, an open body keeps its slot for
// 4 s (renewed); a Transport closed with a body still open (its process crashed) frees the
// slot once the lease expires, and a waiting Transport of another process then gets it: within
// the lease and a poll on an idle machine, asserted within ten times that. (A lease of a
// second, renewed every third of it, outlasts a loaded machine's scheduling delays.)
func TestCrashedInFlightLeaseFreesAfterTTL(t *testing.T) {
	srv := redistest.Start(t)
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	const ttl = time.Second
	sa, sb := leaseStore(t, srv), leaseStore(t, srv)
	opts := []ratemonitor.Option{ratemonitor.WithRules(minute), ratemonitor.WithInFlight(1), ratemonitor.WithInFlightLease(ttl)}
	a, err := ratemonitor.New(nil, append(opts, ratemonitor.WithStore(sa))...)
	if err != nil {
		t.Fatal(err)
	}
	b := newTransport(t, nil, append(opts, ratemonitor.WithStore(sb))...)
	ctx := context.Background()
	resp, err := do(a, ctx, up.URL)
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
	r, err := do(b, ctx, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	took := time.Since(closed)
	t.Logf("b got the crashed slot %v after the crash (lease %v, poll %v)", took.Round(time.Millisecond), ttl, inFlightPoll)
	if took > 10*(ttl+inFlightPoll) {
		t.Errorf("b got the crashed slot after %v, want within the lease (%v) and a poll, ten times over", took, ttl)
	}
}

// TestInFlightDegradedHeldToShare: with the shared store down, under Degrade, slots are counted in this
// process at its share (0.5 of WithInFlight(4): 2): 12 concurrent requests to an upstream
// that takes 20 ms each all succeed, never more than 2 at once; InFlight is 0 after.
func TestInFlightDegradedHeldToShare(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv, redisstore.Options{Prefix: "inflight-degraded"})
	var now, most atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
	}))
	defer up.Close()
	tr := newTransport(t, nil, ratemonitor.WithRules(strategy.Rule{Limit: 1000, Window: time.Second}), ratemonitor.WithStore(st),
		ratemonitor.WithPacing(), ratemonitor.WithDegraded(ratemonitor.DegradedConfig{Share: 0.5, NoHoldBack: true}),
		ratemonitor.WithLogger(discard), ratemonitor.WithInFlight(4))
	srv.Stop()
	upstreamtest.ConcurrentRun(t, []*ratemonitor.Transport{tr}, up.URL, 12, 1)
	if m := most.Load(); m != 2 {
		t.Errorf("degraded: the upstream saw %d in flight at most, want 2 (half of 4)", m)
	}
}

// The tests below come from the adversarial review (rev2) of issue 15: each comment describes
// the defect the reviewer found, as it was before its fix; the test asserts the fixed
// behaviour.

// TestInFlightDegradedCountsSlotsHeldInStore: WithInFlight(2) over Redis, one process (Share
// 1). Two requests hold both slots (bodies open) in the store when Redis goes down. Degraded,
// the Transport counted slots "at its share of n" among those taken while degraded only,
// forgetting the two it still held, so two more requests went: 4 in flight from one process
// against a limit of 2.
func TestInFlightDegradedCountsSlotsHeldInStore(t *testing.T) {
	srv := redistest.Start(t)
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	tr := newTransport(t, nil, ratemonitor.WithRules(strategy.Rule{Limit: 1000, Window: time.Second}), ratemonitor.WithStore(leaseStore(t, srv)),
		ratemonitor.WithPacing(), ratemonitor.WithDegraded(ratemonitor.DegradedConfig{Share: 1, NoHoldBack: true}),
		ratemonitor.WithLogger(discard), ratemonitor.WithInFlight(2))
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for range 2 {
		r, err := do(tr, context.Background(), up.URL)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, r)
	}
	srv.Stop()
	sent := 0
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		r, err := do(tr, ctx, up.URL)
		cancel()
		if err == nil {
			sent++
			open = append(open, r)
		}
	}
	if sent != 0 {
		t.Errorf("with 2 of WithInFlight(2) held, the degraded Transport sent %d more (InFlight %d): it counts only slots taken while degraded", sent, tr.InFlight(key))
	}
}

// TestInFlightCutOffAcquireReleasesItsLease: a request whose context ends while its AcquireLease
// is on the wire (Redis busy for a second: DEBUG SLEEP from another client, as a slow script or
// a fork would do) gives up, but Redis still runs the script and takes the lease; nobody
// released it, though the Transport knows the lease id it sent, so WithInFlight(1)'s only
// slot was held for the default lease (30 s) by nothing. The next request, sent once Redis
// answers again, must get the slot: within 10 s (it takes a moment; the defect, 30 s).
func TestInFlightCutOffAcquireReleasesItsLease(t *testing.T) {
	srv := redistest.StartWith(t, "--enable-debug-command", "yes")
	up, _, _ := upstreamtest.InFlight(t)
	st := leaseStore(t, srv)
	tr := newTransport(t, nil, ratemonitor.WithRules(minute), ratemonitor.WithInFlight(1), ratemonitor.WithStore(st),
		ratemonitor.WithLogger(discard), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing))
	admin := srv.Client()
	if err := admin.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := do(tr, context.Background(), up.URL); err != nil { // a connection and the script loaded
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	slept := make(chan error, 1)
	go func() { slept <- admin.Do(context.Background(), "DEBUG", "SLEEP", "1").Err() }()
	asleep(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := do(tr, ctx, up.URL)
	cancel()
	if err == nil {
		t.Fatal("the request during DEBUG SLEEP got through")
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := do(tr, ctx, up.URL)
	if err != nil {
		key := strings.TrimPrefix(up.URL, "http://")
		t.Fatalf("the next request, Redis answering again and nothing in flight here (InFlight %d): %v; leases in Redis: %d (the cut-off acquire's)",
			tr.InFlight(key), err, admin.ZCard(context.Background(), st.LeaseKey(key)).Val())
	}
	r.Body.Close()
}

// asleep waits until srv answers no PING within 50 ms: a DEBUG SLEEP sent from another client
// has begun (on a loaded machine, it may reach the server late).
func asleep(t *testing.T, srv *redistest.Server) {
	t.Helper()
	c := srv.Client()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err != nil { // go-redis's read timeout, or the context's
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server still answers PING (%v) 10 s after DEBUG SLEEP was sent", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestInFlightRedisRestartRestoresLeases: WithInFlight(1) over Redis; Transport a's request
// holds the slot (body open) when Redis restarts empty. a's renewal finds its lease gone, takes
// the slot again (the key has room) and reports the loss (observe.StateLost, Op "lease"), so
// Transport b (another process) then waits for the only slot until its deadline instead of
// sending a second request against a limit of 1 (Xero's "concurrent" 429): a detected loss of
// state is reported (docs/pacing.md). Before, the lease was neither put back nor reported, and
// the log said "its lease had expired".
func TestInFlightRedisRestartRestoresLeases(t *testing.T) {
	srv := redistest.Start(t)
	up, _, _ := upstreamtest.InFlight(t)
	const ttl = time.Second // renewed every third of it: outlasts a loaded machine's delays
	ev := events{make(chan observe.Event, 64)}
	opts := []ratemonitor.Option{ratemonitor.WithRules(minute), ratemonitor.WithInFlight(1), ratemonitor.WithInFlightLease(ttl), ratemonitor.WithLogger(discard)}
	a := newTransport(t, nil, append(opts, ratemonitor.WithStore(leaseStore(t, srv)), ratemonitor.WithObserver(ev))...)
	b := newTransport(t, nil, append(opts, ratemonitor.WithStore(leaseStore(t, srv)))...)
	resp, err := do(a, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	srv.Restart()
	// a's renewal finds its lease gone, takes the slot again and reports the loss.
	var lost *observe.Event
	for deadline := time.After(30 * time.Second); lost == nil; {
		select {
		case e := <-ev.ch:
			if e.Kind == observe.StateLost && e.Op == "lease" {
				lost = &e
			}
		case <-deadline:
			t.Fatal("no observe.StateLost event (Op lease) within 30 s for the lease the restart lost")
		}
	}
	if lost.Err == nil || !strings.Contains(lost.Err.Error(), "it was taken again") {
		t.Errorf("StateLost %+v: want it to say the slot was taken again", *lost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r, err := do(b, ctx, up.URL)
	if err == nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		t.Error("b sent a second request while a's holds the only slot (WithInFlight(1)): the lease lost in the restart was not restored")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("b: %v, want it to wait for the slot until its deadline", err)
	}
}

// inFlightPoll is the Transport's poll for slots freed by other processes (docs/pacing.md).
const inFlightPoll = 50 * time.Millisecond

package ratemonitor

// The tests of this file come from the adversarial review (rev2) of issue 15: each comment
// describes the defect the reviewer found, as it was before its fix; the test asserts the
// fixed behaviour.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

type reviewEvents struct{ ch chan observe.Event }

func (o reviewEvents) Observe(e observe.Event) {
	select {
	case o.ch <- e:
	default:
	}
}

// TestInFlightDegradedCountsSlotsHeldInStore: WithInFlight(2) over Redis, one process (Share
// 1). Two requests hold both slots (bodies open) in the store when Redis goes down. Degraded,
// the Transport counts slots "at its share of n" in f.local only, forgetting the two it still
// holds (f.held counts them), so two more requests go: 4 in flight from one process against a
// limit of 2.
func TestInFlightDegradedCountsSlotsHeldInStore(t *testing.T) {
	srv := redistest.Start(t)
	up, now, _ := countingUpstream(t)
	_ = now
	key := strings.TrimPrefix(up.URL, "http://")
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 1000, Window: time.Second}), WithStore(redisLeaseStore(t, srv)),
		WithPacing(), WithDegraded(DegradedConfig{Share: 1, NoHoldBack: true}), WithLogger(discard), WithInFlight(2))
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for range 2 {
		r, err := send(tr, context.Background(), up.URL)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, r)
	}
	srv.Stop()
	sent := 0
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		r, err := send(tr, ctx, up.URL)
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
// is on the wire (Redis busy for 300 ms: DEBUG SLEEP from another client, as a slow script or
// a fork would do) gives up, but Redis still runs the script and takes the lease; nobody
// releases it, though the Transport knows the lease id it sent, so WithInFlight(1)'s only
// slot is held for DefaultLeaseTTL (30 s) by nothing. The next request, sent once Redis
// answers again, cannot get the slot within 1 s.
func TestInFlightCutOffAcquireReleasesItsLease(t *testing.T) {
	srv := redistest.StartWith(t, "--enable-debug-command", "yes")
	up, _, _ := countingUpstream(t)
	st := redisLeaseStore(t, srv)
	tr := newTransport(t, nil, WithRules(minute), WithInFlight(1), WithStore(st), WithLogger(discard),
		WithErrorPolicy(FailClosed))
	admin := srv.Client()
	if err := admin.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := send(tr, context.Background(), up.URL); err != nil { // a connection and the script loaded
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	slept := make(chan error, 1)
	go func() { slept <- admin.Do(context.Background(), "DEBUG", "SLEEP", "0.3").Err() }()
	time.Sleep(50 * time.Millisecond) // the server is asleep
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := send(tr, ctx, up.URL)
	cancel()
	if err == nil {
		t.Fatal("the request during DEBUG SLEEP got through")
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := send(tr, ctx, up.URL)
	if err != nil {
		key := strings.TrimPrefix(up.URL, "http://")
		t.Fatalf("the next request, Redis answering again and nothing in flight here (InFlight %d): %v; leases in Redis: %d (the cut-off acquire's)",
			tr.InFlight(key), err, admin.ZCard(context.Background(), st.LeaseKey(key)).Val())
	}
	r.Body.Close()
}

// TestInFlightRedisRestartRestoresLeases: WithInFlight(1) over Redis; Transport a's request
// holds the slot (body open) when Redis restarts empty. a's renewal finds its lease gone, takes
// the slot again (the key has room) and reports the loss (observe.StateLost, Op "lease"), so
// Transport b (another process) then waits for the only slot until its deadline instead of
// sending a second request against a limit of 1 (Xero's "concurrent" 429). DESIGN §9: "a
// detected loss of state is reported". (Review rev2 #4: before, the lease was neither put back
// nor reported, and the log said "its lease had expired".)
func TestInFlightRedisRestartRestoresLeases(t *testing.T) {
	srv := redistest.Start(t)
	up, _, _ := countingUpstream(t)
	const ttl = 200 * time.Millisecond
	events := reviewEvents{make(chan observe.Event, 64)}
	opts := []Option{WithRules(minute), WithInFlight(1), WithInFlightLease(ttl), WithLogger(discard)}
	a := newTransport(t, nil, append(opts, WithStore(redisLeaseStore(t, srv)), WithObserver(events))...)
	b := newTransport(t, nil, append(opts, WithStore(redisLeaseStore(t, srv)))...)
	resp, err := send(a, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	srv.Restart()
	// a's renewal finds its lease gone, takes the slot again and reports the loss.
	var lost *observe.Event
	for deadline := time.After(5 * time.Second); lost == nil; {
		select {
		case e := <-events.ch:
			if e.Kind == observe.StateLost && e.Op == "lease" {
				lost = &e
			}
		case <-deadline:
			t.Fatal("no observe.StateLost event (Op lease) within 5 s for the lease the restart lost")
		}
	}
	if lost.Err == nil || !strings.Contains(lost.Err.Error(), "it was taken again") {
		t.Errorf("StateLost %+v: want it to say the slot was taken again", *lost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r, err := send(b, ctx, up.URL)
	if err == nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		t.Error("b sent a second request while a's holds the only slot (WithInFlight(1)): the lease lost in the restart was not restored")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("b: %v, want it to wait for the slot until its deadline", err)
	}
}

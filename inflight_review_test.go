package ratemonitor

// The tests of this file come from the adversarial review (rev2) of issue 15: each comment
// describes the defect the reviewer found, as it was before its fix; the test asserts the
// fixed behaviour.

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/observe"
)

// reviewEvents keeps the observer's events, dropping those that do not fit.
type reviewEvents struct{ ch chan observe.Event }

func (o reviewEvents) Observe(e observe.Event) {
	select {
	case o.ch <- e:
	default:
	}
}

// panicFirst panics on its first RoundTrip (a bug in a wrapped RoundTripper; net/http's
// server recovers a handler's panic, so the process lives on), then delegates.
type panicFirst struct {
	calls atomic.Int32
	base  http.RoundTripper
}

func (p *panicFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.calls.Add(1) == 1 {
		panic("review: base RoundTripper bug")
	}
	return p.base.RoundTrip(r)
}

// TestInFlightPanicInBaseFreesSlot: a panic in the base RoundTripper must not keep the
// request's in-flight slot for ever. With WithInFlight(1) the next request, after the panic
// was recovered, must get the slot; today the slot stays held (and renewed for as long as the
// process lives), so every later request of the key waits until its deadline.
func TestInFlightPanicInBaseFreesSlot(t *testing.T) {
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	tr := newTransport(t, &panicFirst{base: http.DefaultTransport}, WithRules(minute), WithInFlight(1))
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("the base did not panic")
			}
		}()
		req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
		tr.RoundTrip(req)
	}()
	if n := tr.InFlight(key); n != 0 {
		t.Errorf("after the panic InFlight = %d, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	resp, err := send(tr, ctx, up.URL)
	if err != nil {
		t.Fatalf("the request after a recovered panic: %v, want it sent (its slot should be free)", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestQueuedCountsInFlightWaiters: with WithInFlight(1) and one request holding the
// slot, three more requests wait for it; Queued(key) is documented as "how many requests
// ... are waiting for a slot on key" and is the only figure a dashboard has for waiters, yet
// it reports 0 for requests waiting for an in-flight slot.
func TestQueuedCountsInFlightWaiters(t *testing.T) {
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	tr := newTransport(t, nil, WithRules(minute), WithPacing(), WithInFlight(1))
	first, err := send(tr, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := send(tr, ctx, up.URL); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(2 * time.Second)
	for tr.Queued(inflightQueue+key) != 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got := tr.Queued(key)
	cancel()
	wg.Wait()
	first.Body.Close()
	if got != 3 {
		t.Errorf("Queued(%q) = %d with 3 requests waiting for its in-flight slot, want 3", key, got)
	}
}

// TestInFlightLostLeaseOnFullKeyReportedOnce: WithInFlight(1) on one memory store shared by
// two Transports. a's request holds the slot when its lease vanishes from the store (as a
// flush would do: released behind a's back), and b takes the freed slot. a's renewal then
// finds its lease gone and the key full: it cannot take the slot again, and reports the loss
// once (one observe.StateLost, Op "lease", saying the slots are all taken), though it keeps
// trying every round; once b's request ends, a takes its slot again and the key is back to 1.
func TestInFlightLostLeaseOnFullKeyReportedOnce(t *testing.T) {
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	const ttl = 100 * time.Millisecond
	events := reviewEvents{make(chan observe.Event, 64)}
	a := newTransport(t, nil, WithRules(minute), WithInFlight(1), WithInFlightLease(ttl), WithLogger(discard), WithObserver(events))
	b := newTransport(t, nil, WithRules(minute), WithInFlight(1), WithInFlightLease(ttl), WithLogger(discard), WithStore(a.Store()))
	ra, err := send(a, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Body.Close()
	leaser := a.Store().(cache.Leaser)
	if err := leaser.ReleaseLease(context.Background(), key, "1"); err != nil { // the memory store's first lease id
		t.Fatal(err)
	}
	rb, err := send(b, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	var lost []observe.Event
	deadline := time.After(5 * time.Second)
	for len(lost) == 0 {
		select {
		case e := <-events.ch:
			if e.Kind == observe.StateLost {
				lost = append(lost, e)
			}
		case <-deadline:
			t.Fatal("no StateLost within 5 s of the lease's loss")
		}
	}
	time.Sleep(3 * ttl) // a dozen more renewal rounds of a, each failing to take the slot again
	for len(events.ch) > 0 {
		if e := <-events.ch; e.Kind == observe.StateLost {
			lost = append(lost, e)
		}
	}
	if len(lost) != 1 || lost[0].Op != "lease" || lost[0].Key != key || lost[0].Err == nil ||
		!strings.Contains(lost[0].Err.Error(), "all taken") {
		t.Fatalf("StateLost events %+v, want exactly one, Op lease, on %q, saying the slots are all taken", lost, key)
	}
	rb.Body.Close()
	// a's renewal takes the freed slot again: from then on no other lease can be taken.
	for stop := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l, err := leaser.AcquireLease(context.Background(), key, 1, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Acquired() {
			if l.Held != 1 {
				t.Errorf("held %d, want 1 (a's restored lease)", l.Held)
			}
			break
		}
		leaser.ReleaseLease(context.Background(), key, l.ID)
		if time.Now().After(stop) {
			t.Fatal("5 s after b's request ended, a's request (still in flight) holds no slot again")
		}
	}
}

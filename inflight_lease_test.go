package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/observe"
)

// TestInFlightLeaseRenewedWhileTheBodyIsOpen: while a body is open its lease is renewed (here every
// 250 ms of a 1 s lease, on the manual clock), so after 3 s no other holder can take its slot;
// after Close nothing is renewed and the slot frees at its lease's expiry, as a crashed process's
// would.
func TestInFlightLeaseRenewedWhileTheBodyIsOpen(t *testing.T) {
	clk := clock.NewManual(t0)
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	tr, err := New(nil, WithRules(minute), WithStore(store), WithInFlight(1), WithInFlightLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := send(tr, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Body.Close()
	other := func() bool {
		l, err := store.AcquireLease(context.Background(), key, 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l.Acquired() {
			store.ReleaseLease(context.Background(), key, l.ID)
		}
		return l.Acquired()
	}
	for i := 1; i <= 12; i++ {
		waitFor(t, "the renewer to sleep", func() bool { n, ok := clk.Next(); return ok && n.Equal(clk.Now().Add(250*time.Millisecond)) })
		clk.Advance(250 * time.Millisecond)
		// The renewer has renewed when it sleeps again.
		waitFor(t, "the renewal", func() bool { n, ok := clk.Next(); return ok && n.Equal(clk.Now().Add(250*time.Millisecond)) })
		if other() {
			t.Fatalf("at +%v: another holder took the slot of a request in flight", time.Duration(i)*250*time.Millisecond)
		}
	}
	tr.Close()
	if clk.Sleepers() != 0 {
		t.Fatalf("after Close: %d sleepers, want the renewer gone", clk.Sleepers())
	}
	clk.Advance(time.Second - time.Microsecond)
	if other() {
		t.Fatal("the slot freed before its lease's expiry")
	}
	clk.Advance(time.Microsecond)
	if !other() {
		t.Fatal("the slot did not free at its lease's expiry after Close")
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
		panic("test: base RoundTripper bug")
	}
	return p.base.RoundTrip(r)
}

// TestInFlightPanicInBaseFreesSlot: a panic in the base RoundTripper does not keep the
// request's in-flight slot for ever: with WithInFlight(1) the next request, after the panic
// was recovered, gets the slot. (Before issue 15's fix the slot stayed held, renewed for as
// long as the process lived, and every later request of the key waited until its deadline.)
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
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit) // a held slot: it waits until then
	defer cancel()
	resp, err := send(tr, ctx, up.URL)
	if err != nil {
		t.Fatalf("the request after a recovered panic: %v, want it sent (its slot should be free)", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// eventChan keeps the observer's events, dropping those that do not fit.
type eventChan struct{ ch chan observe.Event }

func (o eventChan) Observe(e observe.Event) {
	select {
	case o.ch <- e:
	default:
	}
}

// TestInFlightLostLeaseOnFullKeyReportedOnce: WithInFlight(1) on one memory store shared by
// two Transports. a's request holds the slot when its lease vanishes from the store (as a
// flush would do: released behind a's back), and b takes the freed slot. a's renewal then
// finds its lease gone and the key full: it cannot take the slot again, and reports the loss
// once (one observe.StateLost, Op "lease", saying the slots are all taken), though it tries
// again every round; once b's request ends, a takes its slot again and the key is back to 1.
// The leases and their renewals run on the manual clock, moved one renewal round at a time
// once both renewers sleep, so no lease expires by the machine being slow.
func TestInFlightLostLeaseOnFullKeyReportedOnce(t *testing.T) {
	clk := clock.NewManual(t0)
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	const ttl, every = time.Second, 250 * time.Millisecond // a renewal round every ttl/4
	events := eventChan{make(chan observe.Event, 64)}
	a := newTransport(t, nil, WithRules(minute), WithStore(store), WithInFlight(1), WithInFlightLease(ttl), WithLogger(discard), WithObserver(events))
	b := newTransport(t, nil, WithRules(minute), WithStore(store), WithInFlight(1), WithInFlightLease(ttl), WithLogger(discard))
	ra, err := send(a, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Body.Close()
	if err := store.ReleaseLease(context.Background(), key, "1"); err != nil { // the memory store's first lease id
		t.Fatal(err)
	}
	rb, err := send(b, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	// asleep: the n renewers sleep until the next round (each has finished its round).
	asleep := func(n int) func() bool {
		return func() bool {
			next, ok := clk.Next()
			return clk.Sleepers() == n && ok && next.Equal(clk.Now().Add(every))
		}
	}
	for range 12 { // 3 s of rounds: a fails each time to take its slot again, b renews its lease
		waitFor(t, "both renewers to sleep", asleep(2))
		clk.Advance(every)
	}
	waitFor(t, "both renewers to sleep", asleep(2))
	var lost []observe.Event
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
	// At the next round b's renewer ends (it holds nothing) and a's takes the freed slot
	// again: from then on no other lease can be taken.
	clk.Advance(every)
	waitFor(t, "a's renewer to sleep", asleep(1))
	l, err := store.AcquireLease(context.Background(), key, 1, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if l.Acquired() {
		store.ReleaseLease(context.Background(), key, l.ID)
		t.Fatal("a renewal round after b's request ended, a's request (still in flight) holds no slot again")
	}
	if l.Held != 1 {
		t.Errorf("held %d, want 1 (a's restored lease)", l.Held)
	}
}

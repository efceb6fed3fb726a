package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
	up, _, _ := countingUpstream(t)
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
	up, _, _ := countingUpstream(t)
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

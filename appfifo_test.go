package ratemonitor

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// keyLog is a base RoundTripper that logs the key and the manual clock's instant of every
// request it is given.
type keyLog struct {
	tr   *Transport
	b    *clockBase
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) RoundTrip(req *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.keys = append(l.keys, l.tr.Key(req))
	l.mu.Unlock()
	return l.b.RoundTrip(req)
}

func (l *keyLog) at(i int) (string, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.keys[i], l.b.sent[i].Sub(t0)
}

// TestAppFIFOServesBurstFirst: a burst of key A waiting for room at the app key is served
// before single requests of other keys that arrive after it, although each single would fit
// earlier (the app frees one slot a second); then the singles go in arrival order, one per
// freed slot. The clock moves only when the one waiter at the head is asleep on it and
// everything before it has been sent, so every instant is exact.
func TestAppFIFOServesBurstFirst(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	log := &keyLog{tr: tr, b: up}
	tr.base = log
	ctx := context.Background()
	// Other processes filled the app's minute, one request a second from t0 to t0+9s: from
	// t0+60s one slot frees a second, and five are free at t0+64s.
	for i := range 10 {
		clk.Set(t0.Add(time.Duration(i) * time.Second))
		if err := tr.store.Record(ctx, tr.meters[0].strat, "app", 1); err != nil {
			t.Fatal(err)
		}
	}
	appQ := meterQueue + "app\x00app"

	type result struct {
		r   *Reservation
		err error
	}
	burst := make(chan result, 1)
	go func() {
		r, err := tr.Reserve(ctx, "A", 5)
		burst <- result{r, err}
	}()
	waitSleepers(t, clk, 1)
	if next, _ := clk.Next(); !next.Equal(t0.Add(64*time.Second)) || tr.Queued(appQ) != 1 {
		t.Fatalf("the burst waits until %v with %d queued at the app key; want 64s, 1", next.Sub(t0), tr.Queued(appQ))
	}

	singles := []string{"B", "C", "D"}
	errs := make(chan error, len(singles))
	for i, key := range singles {
		go func() { errs <- doKey(tr, ctx, key) }()
		waitFor(t, key+" queued at the app key", func() bool { return tr.Queued(appQ) == i+2 })
	}
	// The singles wait their turn behind the burst, off the clock: only the burst sleeps.
	if clk.Sleepers() != 1 || up.count() != 0 {
		t.Fatalf("%d sleepers, %d sent; want only the burst asleep and nothing sent", clk.Sleepers(), up.count())
	}

	// Slots free at 60..63 s go to nobody: the burst is first and needs five.
	clk.Set(t0.Add(64 * time.Second))
	res := <-burst
	if res.err != nil {
		t.Fatal(res.err)
	}
	if !res.r.at.Equal(t0.Add(64*time.Second)) || up.count() != 0 {
		t.Fatalf("burst reserved at %v with %d singles sent before it; want 64s and none", res.r.at.Sub(t0), up.count())
	}
	// Then one single per freed slot, in arrival order.
	for i, key := range singles {
		at := t0.Add(time.Duration(65+i) * time.Second)
		waitSleepers(t, clk, 1)
		if next, _ := clk.Next(); !next.Equal(at) || up.count() != i {
			t.Fatalf("before %s: next wake-up at %v, %d sent; want %v, %d", key, next.Sub(t0), up.count(), at.Sub(t0), i)
		}
		clk.Set(at)
		waitFor(t, key+" sent", func() bool { return up.count() == i+1 })
		if got, when := log.at(i); got != key || when != at.Sub(t0) {
			t.Fatalf("send %d: %s at %v, want %s at %v", i, got, when, key, at.Sub(t0))
		}
	}
	for range singles {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s, err := tr.Status(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	if s.Rules[0].Used != 5 || s.Meters[0].Rules[0].Used != 10 || tr.Queued(appQ) != 0 || clk.Sleepers() != 0 {
		t.Fatalf("A counts %d, app %d, %d queued, %d sleepers; want 5, 10, 0, 0", s.Rules[0].Used, s.Meters[0].Rules[0].Used, tr.Queued(appQ), clk.Sleepers())
	}
}

// TestAppFIFOKeyAtItsLimitHoldsNoOneUp: a request whose own key is at its limit (or paused)
// waits for its key without taking a turn at the app key, so requests of other keys with room
// on their key and on the app key go at once; it takes its turn at the app key once its key
// has room.
func TestAppFIFOKeyAtItsLimitHoldsNoOneUp(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 1, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	log := &keyLog{tr: tr, b: up}
	tr.base = log
	ctx := context.Background()
	if err := doKey(tr, ctx, "A"); err != nil { // A's minute is used up until 60 s
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- doKey(tr, ctx, "A") }()
	waitSleepers(t, clk, 1)
	if next, _ := clk.Next(); !next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the second request of A waits until %v, want 60s", next.Sub(t0))
	}
	clk.Set(t0.Add(10 * time.Second))
	for i, key := range []string{"B", "C"} {
		sendNow(t, tr, clk, ctx, key)
		if got, when := log.at(i + 1); got != key || when != 10*time.Second {
			t.Fatalf("send %d: %s at %v, want %s at 10s", i+1, got, when, key)
		}
	}
	clk.Set(t0.Add(time.Minute))
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	if got, when := log.at(3); got != "A" || when != time.Minute {
		t.Fatalf("send 3: %s at %v, want A at 1m0s", got, when)
	}
	s, err := tr.Status(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	if s.Rules[0].Used != 1 || s.Meters[0].Rules[0].Used != 3 || tr.Queued(meterQueue+"app\x00app") != 0 || tr.Queued("A") != 0 {
		t.Fatalf("A counts %d, app %d, queued %d at the app key and %d on A; want 1, 3, 0, 0",
			s.Rules[0].Used, s.Meters[0].Rules[0].Used, tr.Queued(meterQueue+"app\x00app"), tr.Queued("A"))
	}
}

package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// clockBase is a base RoundTripper that logs the manual clock's instant of every request it is
// given: what the upstream would see.
type clockBase struct {
	clk  *clock.Manual
	mu   sync.Mutex
	sent []time.Time
}

func (b *clockBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.sent = append(b.sent, b.clk.Now())
	b.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// maxInWindow is the most requests the upstream saw in any window of length w.
func (b *clockBase) maxInWindow(w time.Duration) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	most := 0
	for _, s := range b.sent {
		n := 0
		for _, x := range b.sent {
			if !x.Before(s) && x.Before(s.Add(w)) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

func (b *clockBase) count() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.sent) }

// appSetup is a paced Transport with one rule on the request's key and one on the app key,
// over a memory store on a manual clock.
func appSetup(t *testing.T, key, app strategy.Rule, opts ...Option) (*Transport, *clockBase, *clock.Manual) {
	return onManualClock(t, append([]Option{WithRules(key), WithAppRules("app", app), WithPacing()}, opts...)...)
}

// onManualClock is a Transport made with opts over a memory store on a manual clock at t0,
// logging nothing, whose base logs the instant of every request it is given.
func onManualClock(t *testing.T, opts ...Option) (*Transport, *clockBase, *clock.Manual) {
	clk := clock.NewManual(t0)
	st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := &clockBase{clk: clk}
	return newTransport(t, b, append([]Option{WithStore(st), WithLogger(discard)}, opts...)...), b, clk
}

// waitLimit bounds, in real time, how long a test waits for goroutines to reach a state (asleep
// on the manual clock, queued): they get there in milliseconds; the bound only ends a test that
// would otherwise hang, and is generous so that a loaded machine does not fail it.
const waitLimit = 30 * time.Second

// waitSleepers waits until at least n goroutines sleep on clk.
func waitSleepers(t *testing.T, clk *clock.Manual, n int) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); clk.Sleepers() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines sleep on the clock, want %d", clk.Sleepers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls cond, as waitSleepers does, and fails the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after %v", what, waitLimit)
		}
	}
}

// doKey sends one GET on key through tr with ctx and closes the body.
func doKey(tr *Transport, ctx context.Context, key string) error {
	req, _ := http.NewRequestWithContext(WithKey(ctx, key), http.MethodGet, "http://example.invalid/", nil)
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	return err
}

// sendAll sends n paced requests on key at once and moves the manual clock to each wake-up
// until all are sent.
func sendAll(t *testing.T, tr *Transport, clk *clock.Manual, key string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	var finished atomic.Int64
	errs := make(chan error, n)
	for range n {
		wg.Go(func() { errs <- doKey(tr, context.Background(), key); finished.Add(1) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			return
		case <-time.After(5 * time.Millisecond):
			// Move the clock only when nothing else can act: every request not yet sent
			// waits in the key's queue or the app meter's (only their heads act) and a head
			// sleeps on the clock. Moving it while a head is still working out its wait would
			// make it wake late, at the next sleeper's instant.
			queued := tr.Queued(key) + tr.queued(meterQueue+"app\x00app")
			quiet := int(finished.Load())+queued == n && clk.Sleepers() > 0
			if next, ok := clk.Next(); ok && quiet {
				clk.Set(next)
			}
		}
	}
}

// TestAppWaitNeverOvershootsKeyRule: a request waiting for the app key does not hold its own
// key's slot meanwhile, so its key's rule holds in the upstream's view, counted from the sends.
func TestAppWaitNeverOvershootsKeyRule(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 2, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	// Other tenants filled the app's minute at t0.
	if err := tr.store.Record(ctx, tr.meters[0].strat, "app", 10); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	sendAll(t, tr, clk, "k", 6)
	if got := up.maxInWindow(time.Minute); got != 2 {
		t.Fatalf("upstream saw up to %d requests on k in a minute (rule 2/min), at %v", got, up.sent)
	}
	// The first two go when the app frees at 60 s, then two a minute.
	if want := t0.Add(180 * time.Second); !up.sent[5].Equal(want) {
		t.Fatalf("sixth request at %v, want %v (all: %v)", up.sent[5].Sub(t0), want.Sub(t0), up.sent)
	}
}

// TestAppPauseNeverOvershootsKeyRule: the same through an app-wide pause (Xero's 429
// "appminute").
func TestAppPauseNeverOvershootsKeyRule(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 3, Window: time.Minute}, strategy.Rule{Limit: 1000, Window: time.Minute})
	if err := tr.store.(cache.Syncer).Sync(context.Background(), tr.meters[0].strat, "app", engine.Update{Pause: 60 * time.Second}); err != nil {
		t.Fatal(err)
	}
	sendAll(t, tr, clk, "k", 6)
	if got := up.maxInWindow(time.Minute); got != 3 {
		t.Fatalf("upstream saw up to %d requests on k in a minute (rule 3/min)", got)
	}
	if !up.sent[0].Equal(t0.Add(time.Minute)) {
		t.Fatalf("first request sent at %v, during the app's pause", up.sent[0].Sub(t0))
	}
}

// TestPausedKeyHoldsWhileWaitingForApp: a pause on the key that arrives while a request waits
// for the app key holds that request too.
func TestPausedKeyHoldsWhileWaitingForApp(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	if err := tr.store.Record(ctx, tr.meters[0].strat, "app", 10); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- doKey(tr, ctx, "k") }()
	waitSleepers(t, clk, 1)
	clk.Advance(10 * time.Second)
	// Another request of k met a 429 with Retry-After: 120.
	if err := tr.store.(cache.Syncer).Sync(ctx, tr.strat, "k", engine.Update{Pause: 120 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(60 * time.Second)) // the app frees; k is paused until 130 s
	waitSleepers(t, clk, 1)
	if up.count() != 0 {
		t.Fatalf("sent during the key's pause")
	}
	if next, _ := clk.Next(); !next.Equal(t0.Add(130 * time.Second)) {
		t.Fatalf("waits until %v, want the pause's end at 130s", next.Sub(t0))
	}
	clk.Set(t0.Add(130 * time.Second))
	if err := <-done; err != nil || up.count() != 1 {
		t.Fatalf("after the pause: %v, %d sent", err, up.count())
	}
}

// TestAppWaitPastTheDeadlineRefusedAtOnce: the deadline check takes the app key's wait into account
// at once.
func TestAppWaitPastTheDeadlineRefusedAtOnce(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 1, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	if err := tr.store.Record(ctx, tr.strat, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(52 * time.Second) // k frees in 8 s
	if err := tr.store.Record(ctx, tr.meters[0].strat, "app", 10); err != nil {
		t.Fatal(err)
	} // the app frees in 60 s
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, free := range []bool{false, true} {
		if free {
			clk.Advance(8 * time.Second) // k has room; only the app is full
		}
		err := doKey(tr, dctx, "k")
		var de *DeadlineError
		if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) || de.Wait < 52*time.Second || up.count() != 0 {
			t.Fatalf("k free %v: %v (%+v), %d sent; want a DeadlineError for the app's wait at once", free, err, de, up.count())
		}
		if u := usedOf(t, tr, "k"); u[0] != 1-b2i(free) {
			t.Fatalf("k free %v: k counts %d after the refusal", free, u[0])
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A request queued behind a head that waits for the app key is refused at once when the app's
// wait passes its deadline.
func TestQueuedBehindAnAppWaitRefusedAtOncePastTheDeadline(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	if err := tr.store.Record(ctx, tr.meters[0].strat, "app", 10); err != nil { // app full for 60 s
		t.Fatal(err)
	}
	head := make(chan error, 1)
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	go func() { head <- doKey(tr, hctx, "k") }()
	waitSleepers(t, clk, 1) // the head sleeps on the app's 60 s
	// At once: before the 30 s deadline (the manual clock never moves here, so a request that
	// queued would wait until the context ends).
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := doKey(tr, dctx, "k") // needs ≥ 60 s of the manual clock: must fail at once
	var de *DeadlineError
	if !errors.As(err, &de) || dctx.Err() != nil || up.count() != 0 {
		t.Errorf("queued request behind an app wait of 60s with a 30s deadline: err %v (DeadlineError %v), context %v, %d sent; want a *DeadlineError at once, before the deadline", err, de != nil, dctx.Err(), up.count())
	}
	hcancel()
	<-head
}

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
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
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
	clk := clock.NewManual(t0)
	st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b := &clockBase{clk: clk}
	opts = append([]Option{WithStore(st), WithRules(key), WithAppRules("app", app), WithPacing(), WithLogger(discard)}, opts...)
	return newTransport(t, b, opts...), b, clk
}

func waitSleepers(t *testing.T, clk *clock.Manual, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); clk.Sleepers() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines sleep on the clock, want %d", clk.Sleepers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

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
			// waits in the key's queue (only its head acts) and the head sleeps on the
			// clock. Moving it while the head is still working out its wait would make it
			// wake late, at the next sleeper's instant.
			quiet := int(finished.Load())+tr.Queued(key) == n && clk.Sleepers() > 0
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
	if err := tr.store.Record(ctx, tr.app.strat, "app", 10); err != nil {
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
	if err := tr.store.(cache.Syncer).Sync(context.Background(), tr.app.strat, "app", engine.Update{Pause: 60 * time.Second}); err != nil {
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
	if err := tr.store.Record(ctx, tr.app.strat, "app", 10); err != nil {
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

// TestAppDeadlineAtOnce: the deadline check takes the app key's wait into account at once.
func TestAppDeadlineAtOnce(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 1, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	if err := tr.store.Record(ctx, tr.strat, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(52 * time.Second) // k frees in 8 s
	if err := tr.store.Record(ctx, tr.app.strat, "app", 10); err != nil {
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

// failOn is a memory store whose operations on one key fail, as another Redis Cluster shard
// that is down would.
type failOn struct {
	*cache.Memory
	key string
}

var errShardDown = errors.New("shard down")

func (f failOn) Record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	if key == f.key {
		return errShardDown
	}
	return f.Memory.Record(ctx, s, key, n)
}

func (f failOn) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	if key == f.key {
		return engine.Result{}, errShardDown
	}
	return f.Memory.Reserve(ctx, s, key, n)
}

// TestAppStoreFailure: when the app key's store fails, SendNothing sends nothing and leaves no
// count on the request's key; SendUncounted sends and counts the request's key.
func TestAppStoreFailure(t *testing.T) {
	for _, policy := range []StoreErrorPolicy{SendNothing, SendUncounted} {
		for _, paced := range []bool{false, true} {
			clk := clock.NewManual(t0)
			m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			b := &clockBase{clk: clk}
			var reported []string
			opts := []Option{WithStore(failOn{m, "app"}), WithRules(minute), WithAppRules("app", minute), WithStoreErrorPolicy(policy),
				WithLogger(discard), WithErrorHandler(func(_ *http.Request, key string, _ error) { reported = append(reported, key) })}
			if paced {
				opts = append(opts, WithPacing())
			}
			tr := newTransport(t, b, opts...)
			err = doKey(tr, context.Background(), "k")
			used := usedOf(t, tr, "k")[0]
			var se *StoreError
			switch policy {
			case SendNothing:
				if !errors.As(err, &se) || se.Key != "app" || b.count() != 0 || used != 0 {
					t.Errorf("fail closed, paced %v: %v, sent %d, k counts %d; want a StoreError on app, nothing sent or counted", paced, err, b.count(), used)
				}
			case SendUncounted:
				if err != nil || b.count() != 1 || used != 1 || len(reported) != 1 || reported[0] != "app" {
					t.Errorf("fail open, paced %v: %v, sent %d, k counts %d, reported %v", paced, err, b.count(), used, reported)
				}
			}
		}
	}
}

// TestHugeRetryAfter: a Retry-After far in the future pauses for MaxPause, and MaxPause cannot
// exceed what stores keep.
func TestHugeRetryAfter(t *testing.T) {
	c, tr, a, _, _ := syncSetup(t, SyncConfig{})
	srv, _ := upstreamtest.Counting(t, a.Serve)
	a.Set(429, "Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if s := status(t, tr, "t1"); !s.PausedUntil.Equal(t0.Add(DefaultMaxPause)) {
		t.Fatalf("paused until %v, want t0 + %v", s.PausedUntil, DefaultMaxPause)
	}
	if _, err := New(nil, WithRules(minute), WithSync(SyncConfig{MaxPause: strategy.MaxWindow + 1})); err == nil {
		t.Fatal("a MaxPause above strategy.MaxWindow was accepted")
	}
}

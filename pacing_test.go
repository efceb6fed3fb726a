package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// greedyFinish is the instant the last of total requests can be sent at the earliest under
// rules, starting at start: each request goes at the first instant every rule has room, which
// is optimal for rolling windows.
func greedyFinish(rules []strategy.Rule, start time.Time, total int) time.Time {
	var sent []time.Time
	t := start
	for range total {
		for {
			next := t
			for _, r := range rules {
				var in []time.Time
				for _, s := range sent {
					if t.Before(s.Add(r.Window)) {
						in = append(in, s)
					}
				}
				if len(in) >= r.Limit {
					if free := in[len(in)-r.Limit].Add(r.Window); free.After(next) {
						next = free
					}
				}
			}
			if next.Equal(t) {
				break
			}
			t = next
		}
		sent = append(sent, t)
	}
	return t
}

// TestPacingNeverOvershoots: 64 goroutines pace 2 000 requests for one key through the
// Transport against an upstream that enforces the same layered rules from its own log. Time is
// simulated: the clock moves only when every goroutine is parked in the Transport (the head of
// the queue asleep on the clock, the others queued), so the result depends on no scheduler
// luck. The upstream must see no violation, and the finish must be within 2 % of the optimum.
func TestPacingNeverOvershoots(t *testing.T) {
	const goroutines, total = 64, 2000
	rules := []strategy.Rule{
		{Limit: 50, Window: time.Second, Granularity: 10 * time.Millisecond},
		{Limit: 400, Window: 10 * time.Second, Granularity: 10 * time.Millisecond},
	}
	clk := clock.NewManual(t0)
	up := &upstreamtest.Strict{Clock: clk, Rules: rules}
	srv := httptest.NewServer(up)
	defer srv.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = goroutines
	defer base.CloseIdleConnections()
	tr := newTransport(t, base, WithRules(rules...), WithPacing(), WithClock(clk),
		WithKeyFunc(func(*http.Request) string { return "tenant" }))
	client := &http.Client{Transport: tr}

	var next, active, tooMany atomic.Int64
	active.Store(goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			defer active.Add(-1)
			for next.Add(1) <= total {
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					tooMany.Add(1)
				}
			}
		})
	}
	quiet := func() bool {
		a := active.Load()
		return a > 0 && int64(tr.Queued("tenant")) == a && clk.Sleepers() == 1
	}
	limit := time.Now().Add(2 * time.Minute)
	for active.Load() > 0 && time.Now().Before(limit) {
		if quiet() {
			time.Sleep(50 * time.Microsecond)
			if quiet() { // still parked: nothing can move until the clock does
				at, _ := clk.Next()
				clk.Set(at)
				continue
			}
		}
		time.Sleep(20 * time.Microsecond)
	}
	wg.Wait()
	if active.Load() > 0 {
		t.Fatal("did not finish in 2 minutes of real time")
	}
	arrivals, _, violations := up.Seen()
	if violations != 0 || tooMany.Load() != 0 {
		t.Fatalf("upstream saw %d violations (%d × 429)", violations, tooMany.Load())
	}
	if len(arrivals) != total {
		t.Fatalf("upstream accepted %d, want %d", len(arrivals), total)
	}
	got := arrivals[len(arrivals)-1].Sub(t0)
	best := greedyFinish(rules, t0, total).Sub(t0)
	if got < best || float64(got) > 1.02*float64(best) {
		t.Errorf("finished after %v of simulated time; the optimum is %v (allowed: +2%%)", got, best)
	}
	t.Logf("2000 requests: finished at %v, optimum %v", got, best)
}

// TestFairness: requests that queue on a key are served in arrival order; a newcomer does not
// overtake them.
func TestFairness(t *testing.T) {
	rule := strategy.Rule{Limit: 1, Window: 10 * time.Second}
	clk := clock.NewManual(t0)
	up := &upstreamtest.Strict{Clock: clk, Rules: []strategy.Rule{rule}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	tr := newTransport(t, nil, WithRules(rule), WithPacing(), WithClock(clk),
		WithKeyFunc(func(*http.Request) string { return "k" }))
	client := &http.Client{Transport: tr}
	send := func(order string) error {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Order", order)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := send("first"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var active atomic.Int64
	for i := range 10 {
		active.Add(1)
		wg.Go(func() {
			defer active.Add(-1)
			if err := send(strconv.Itoa(i)); err != nil {
				t.Error(err)
			}
		})
		for tr.Queued("k") != i+1 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	// Move the clock only when every unfinished request is parked in the queue with its head
	// asleep, so no request is in flight when time jumps.
	limit := time.Now().Add(time.Minute)
	for active.Load() > 0 && time.Now().Before(limit) {
		if a := active.Load(); int64(tr.Queued("k")) == a && clk.Sleepers() == 1 {
			at, _ := clk.Next()
			clk.Set(at)
		}
		time.Sleep(50 * time.Microsecond)
	}
	wg.Wait()
	_, order, violations := up.Seen()
	if violations != 0 {
		t.Errorf("%d violations", violations)
	}
	if want := "first 0 1 2 3 4 5 6 7 8 9"; strings.Join(order, " ") != want {
		t.Errorf("served in order %v, want %s", order, want)
	}
	if got := clk.Now().Sub(t0); got != 100*time.Second {
		t.Errorf("10 queued requests at 1 per 10 s took %v, want 100s", got)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

func TestPacingDeadlineAndCancel(t *testing.T) {
	clk := clock.NewManual(t0)
	srv, hits := upstreamtest.Counting(t, nil)
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 2, Window: time.Minute}), WithPacing(), WithClock(clk))
	c := &http.Client{Transport: tr}
	for range 2 {
		if _, err := upstreamtest.Get(t, c, srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	key := strings.TrimPrefix(srv.URL, "http://")

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	body := &bodySpy{Reader: strings.NewReader("x")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, body)
	start := time.Now()
	_, err := tr.RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("pacing past the deadline: %v after %v, want DeadlineExceeded at once", err, time.Since(start))
	}
	if !body.closed {
		t.Error("body not closed")
	}

	// A request queued behind a waiting one is refused at once too when its turn cannot come
	// before its deadline.
	ctx2, cancel2 := context.WithCancel(context.Background())
	headDone := make(chan error)
	go func() {
		req, _ := http.NewRequestWithContext(ctx2, http.MethodGet, srv.URL, nil)
		_, err := tr.RoundTrip(req)
		headDone <- err
	}()
	for clk.Sleepers() != 1 {
		time.Sleep(50 * time.Microsecond)
	}
	ctx3, cancel3 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel3()
	req3, _ := http.NewRequestWithContext(ctx3, http.MethodGet, srv.URL, nil)
	if _, err := tr.RoundTrip(req3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued request past its deadline: %v", err)
	}
	// Cancelling the waiting head returns promptly, records nothing and leaves no sleeper.
	cancel2()
	select {
	case err := <-headDone:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled wait did not return")
	}
	if clk.Sleepers() != 0 || tr.Queued(key) != 0 {
		t.Errorf("left behind: %d sleepers, %d queued", clk.Sleepers(), tr.Queued(key))
	}
	if u := usedOf(t, tr, key); u[0] != 2 || hits.Load() != 2 {
		t.Errorf("used %v, upstream hits %d; want 2 and 2: refused requests must not count", u, hits.Load())
	}
}

func TestReservation(t *testing.T) {
	clk := clock.NewManual(t0)
	srv, hits := upstreamtest.Counting(t, nil)
	key := strings.TrimPrefix(srv.URL, "http://")
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 10, Window: time.Minute}), WithPacing(), WithClock(clk))
	ctx := context.Background()
	r, err := tr.Reserve(ctx, key, 5)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	for range 2 {
		req, _ := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if u := usedOf(t, tr, key)[0]; u != 5 || r.Remaining() != 3 || hits.Load() != 2 {
		t.Fatalf("after 2 sends on a reservation of 5: used %d, remaining %d, hits %d", u, r.Remaining(), hits.Load())
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if u := usedOf(t, tr, key)[0]; u != 2 {
		t.Errorf("after Cancel: used %d, want 2 (spent slots stay counted)", u)
	}
	if err := r.Cancel(ctx); err != nil || usedOf(t, tr, key)[0] != 2 {
		t.Errorf("second Cancel changed the count")
	}
	req, _ := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u := usedOf(t, tr, key)[0]; u != 3 {
		t.Errorf("a request on a spent reservation must be counted as usual: used %d, want 3", u)
	}
	// A reservation for another key is ignored.
	r2, _ := tr.Reserve(ctx, "other", 1)
	req, _ = http.NewRequestWithContext(r2.Context(ctx), http.MethodGet, srv.URL, nil)
	resp, _ = c.Do(req)
	resp.Body.Close()
	if u := usedOf(t, tr, key)[0]; u != 4 || r2.Remaining() != 1 {
		t.Errorf("used %d, other reservation remaining %d", u, r2.Remaining())
	}
	if _, err := tr.Reserve(ctx, key, 11); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("reserve 11 of 10: %v", err)
	}
	if _, err := tr.Reserve(ctx, key, 0); !errors.Is(err, strategy.ErrInvalidBurst) {
		t.Errorf("reserve 0: %v", err)
	}
}

func TestPacingStoreFailure(t *testing.T) {
	broken, _ := cache.NewMemory(cache.MemoryConfig{})
	broken.Close()
	srv, hits := upstreamtest.Counting(t, nil)
	closed := newTransport(t, nil, WithRules(minute), WithStore(broken), WithPacing(), WithStoreErrorPolicy(SendNothing),
		WithLogger(discard))
	var se *StoreError
	if _, err := upstreamtest.Get(t, &http.Client{Transport: closed}, srv.URL); !errors.As(err, &se) || hits.Load() != 0 {
		t.Errorf("fail closed: %v, hits %d", err, hits.Load())
	}
	// SendUncounted by name: paced Transports default to Degrade, which fails closed on a closed
	// store (TestDegradeClosedStore).
	open := newTransport(t, nil, WithRules(minute), WithStore(broken), WithPacing(), WithStoreErrorPolicy(SendUncounted), WithLogger(discard))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: open}, srv.URL); err != nil || hits.Load() != 1 {
		t.Errorf("fail open: %v, hits %d", err, hits.Load())
	}
	if _, err := open.Reserve(context.Background(), "k", 1); !errors.As(err, &se) {
		t.Errorf("Reserve on a broken store: %v", err)
	}
}

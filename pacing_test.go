package ratemonitor

import (
	"context"
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
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
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
	// It takes 2-3 s idle and 13 s at a load of 10 on 2 cores: the bound only ends a hang.
	limit := time.Now().Add(5 * time.Minute)
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
		t.Fatal("did not finish in 5 minutes of real time")
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

// TestPacedQueueServesInArrivalOrder: requests that queue on a key are served in arrival order; a
// newcomer does not overtake them.
func TestPacedQueueServesInArrivalOrder(t *testing.T) {
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

// TestPacedSendsAtTheFirstInstantItsStrategyAllows: the Transport paces under the fixed window and
// the token bucket as under the rolling window: each request goes at the first instant its strategy
// allows.
func TestPacedSendsAtTheFirstInstantItsStrategyAllows(t *testing.T) {
	for _, c := range []struct {
		name string
		s    func() (*engine.Strategy, error)
		want []time.Duration // send instants after t0 (which is on a 10 s boundary)
	}{
		// 3 per aligned 10 s: three at 2 s, the rest when the next window opens.
		{"fixedwindow", func() (*engine.Strategy, error) {
			return fixedwindow.New(strategy.Rule{Limit: 3, Window: 10 * time.Second})
		}, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second, 10 * time.Second, 10 * time.Second}},
		// 2 tokens refilled at one a second: two at once, then one a second.
		{"tokenbucket", func() (*engine.Strategy, error) {
			return tokenbucket.New(strategy.Rule{Limit: 2, Window: 2 * time.Second})
		}, []time.Duration{2 * time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.s()
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewManual(t0)
			st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			b := &clockBase{clk: clk}
			tr := newTransport(t, b, WithStore(st), WithStrategy(s), WithPacing(), WithLogger(discard))
			clk.Advance(2 * time.Second)
			for i := range c.want {
				done := make(chan error, 1)
				go func() { done <- doKey(tr, context.Background(), "k") }()
				// Either the request goes at once, or it sleeps on the clock until the instant
				// its strategy allows, which the clock is then moved to.
				for sent := false; !sent; {
					select {
					case err := <-done:
						if err != nil {
							t.Fatal(err)
						}
						sent = true
					case <-time.After(time.Millisecond):
						if clk.Sleepers() == 1 {
							next, _ := clk.Next()
							clk.Set(next)
						}
					}
				}
				if got := b.sent[i].Sub(t0); got != c.want[i] {
					t.Errorf("request %d sent at %v, want %v", i+1, got, c.want[i])
				}
			}
		})
	}
}

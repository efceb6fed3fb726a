package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/smoothing"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// A paced request whose wait ends after its context's deadline is refused at once with the
// context's error (and its body closed), alone or queued behind a waiting head; a waiting head
// that is cancelled returns promptly; neither counts nor leaves a sleeper or a queue behind.
func TestPacedPastTheDeadlineRefusedAtOnceAndCancelLeavesNothing(t *testing.T) {
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

	// The next slot is a minute away on the manual clock, which never moves by itself: "at
	// once" is "while the 30 s context still runs".
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := &bodySpy{Reader: strings.NewReader("x")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, body)
	_, err := tr.RoundTrip(req)
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("pacing past the deadline: %v (context: %v), want DeadlineExceeded at once, before the deadline", err, ctx.Err())
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
	waitSleepers(t, clk, 1)
	ctx3, cancel3 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel3()
	req3, _ := http.NewRequestWithContext(ctx3, http.MethodGet, srv.URL, nil)
	if _, err := tr.RoundTrip(req3); !errors.Is(err, context.DeadlineExceeded) || ctx3.Err() != nil {
		t.Errorf("queued request past its deadline: %v (context: %v), want DeadlineExceeded at once", err, ctx3.Err())
	}
	// Cancelling the waiting head returns promptly, records nothing and leaves no sleeper.
	cancel2()
	select {
	case err := <-headDone:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled wait: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("cancelled wait did not return")
	}
	if clk.Sleepers() != 0 || tr.Queued(key) != 0 {
		t.Errorf("left behind: %d sleepers, %d queued", clk.Sleepers(), tr.Queued(key))
	}
	if u := usedOf(t, tr, key); u[0] != 2 || hits.Load() != 2 {
		t.Errorf("used %v, upstream hits %d; want 2 and 2: refused requests must not count", u, hits.Load())
	}
}

// TestQueueDeadlineCheckCountsWaitersBeyondBurst: the deadline check of a request that queues
// counts every waiter ahead of it, beyond the key's largest burst. Key k allows 1 request a
// second, taken; 5 reservations wait before ours (no deadline). Ours, with 4 s to its deadline,
// needs at least 5 s (one second per request ahead), so Reserve returns a *DeadlineError at
// once (docs/pacing.md, RoundTrip's and Reserve's docs); a check that peeked a burst of
// min(n+ahead, MaxBurst) = 1 would find 1 s, let it queue, and the caller would wait its whole
// 4 s for the context's plain error. The manual clock never moves here: the only wait that
// passes is real time, and "at once" is "before the deadline".
func TestQueueDeadlineCheckCountsWaitersBeyondBurst(t *testing.T) {
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 1, Window: time.Second}), WithPacing(), WithClock(clk))
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	if _, err := tr.Reserve(bg, "k", 1); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 5)
	for i := range 5 {
		go func() {
			tr.Reserve(bg, "k", 1)
			done <- struct{}{}
		}()
		waitFor(t, "a waiter to queue", func() bool { return tr.Queued("k") == i+1 })
	}
	ctx, cancel := context.WithTimeout(bg, 4*time.Second)
	defer cancel()
	_, err := tr.Reserve(ctx, "k", 1)
	var de *DeadlineError
	if !errors.As(err, &de) || ctx.Err() != nil {
		t.Errorf("Reserve behind 5 waiters at 1/s with 4 s left: %v (context: %v), want a *DeadlineError at once, before the deadline (it needs ≥ 5 s)", err, ctx.Err())
	}
	stop()
	for range 5 {
		<-done
	}
}

// TestMinSpanIsExactPerAlgorithm: minSpan, the least time k requests take one after another
// (what the deadline check of a queued request adds up), is exact for each algorithm.
func TestMinSpanIsExactPerAlgorithm(t *testing.T) {
	mk := func(alg engine.Algorithm, smooth bool, rules ...strategy.Rule) *engine.Strategy {
		s, err := engine.New(alg, rules...)
		if err != nil {
			t.Fatal(err)
		}
		if smooth {
			if s, err = s.Smoothed(); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	perSec := strategy.Rule{Limit: 1, Window: time.Second}
	tenMin := strategy.Rule{Limit: 10, Window: time.Minute}
	sixty := strategy.Rule{Limit: 60, Window: time.Minute}
	cases := []struct {
		name string
		s    *engine.Strategy
		k    int
		want time.Duration
	}{
		{"rolling 1/s, 6", mk(storetest.RollingWindow, false, perSec), 6, 5 * time.Second},
		{"rolling 10/min and 1/s, 25", mk(storetest.RollingWindow, false, tenMin, perSec), 25, 2 * time.Minute},
		{"rolling 10/min, 25", mk(storetest.RollingWindow, false, tenMin), 25, 2 * time.Minute},
		{"fixed 10/min, 25", mk(storetest.FixedWindow, false, tenMin), 25, time.Minute},
		{"fixed 10/min, 15", mk(storetest.FixedWindow, false, tenMin), 15, 0},
		{"token bucket 10/min, 15", mk(storetest.TokenBucket, false, tenMin), 15, 30 * time.Second},
		{"smoothed rolling 60/min, 40", mk(storetest.RollingWindow, true, sixty), 40, 10 * smoothing.Interval(sixty)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := minSpan(c.s, c.k); got != c.want {
				t.Errorf("%s: minSpan = %v, want %v", c.name, got, c.want)
			}
		})
	}
}

package ratemonitor

// The tests of this file come from the adversarial review (rev2) of issue 15: each comment
// describes the defect the reviewer found, as it was before its fix; the test asserts the
// fixed behaviour.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestQueueDeadlineCheckCountsWaitersBeyondBurst: 1 request per second on key k, taken; 5 reservations
// queued before ours (no deadline). Ours, with 2 s to its deadline, needs at least 5 s (one
// second per request ahead), so Reserve must return a *DeadlineError at once (DESIGN §5,
// RoundTrip's and Reserve's docs). queueDeadlineCheck peeks a burst of min(n+ahead, MaxBurst)
// = 1, finds 1 s, lets it queue, and the caller waits its whole 2 s for the context's plain
// error instead. The virtual clock never moves here: the only wait that passes is real time.
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
		for tr.Queued("k") != i+1 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := tr.Reserve(ctx, "k", 1)
	took := time.Since(start)
	var de *DeadlineError
	if !errors.As(err, &de) || took > 500*time.Millisecond {
		t.Errorf("Reserve behind 5 waiters at 1/s with 2 s left: %v after %v, want a *DeadlineError at once (it needs ≥ 5 s)", err, took.Round(time.Millisecond))
	}
	stop()
	for range 5 {
		<-done
	}
}

// TestMinSpanPerAlgorithm: the lower bound on the time k requests take one after another,
// per algorithm, exact values.
func TestMinSpanPerAlgorithm(t *testing.T) {
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
		{"rolling 1/s, 6", mk(rollingwindow.Algorithm{}, false, perSec), 6, 5 * time.Second},
		{"rolling 10/min and 1/s, 25", mk(rollingwindow.Algorithm{}, false, tenMin, perSec), 25, 2 * time.Minute},
		{"rolling 10/min, 25", mk(rollingwindow.Algorithm{}, false, tenMin), 25, 2 * time.Minute},
		{"fixed 10/min, 25", mk(fixedwindow.Algorithm{}, false, tenMin), 25, time.Minute},
		{"fixed 10/min, 15", mk(fixedwindow.Algorithm{}, false, tenMin), 15, 0},
		{"token bucket 10/min, 15", mk(tokenbucket.Algorithm{}, false, tenMin), 15, 30 * time.Second},
		{"smoothed rolling 60/min, 40", mk(rollingwindow.Algorithm{}, true, sixty), 40, 10 * engine.SmoothInterval(sixty)},
	}
	for _, c := range cases {
		if got := minSpan(c.s, c.k); got != c.want {
			t.Errorf("%s: minSpan = %v, want %v", c.name, got, c.want)
		}
	}
}

package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// WaitTime and WaitSeconds tell how long until a burst fits, from the key's oldest counted
// request: to the nanosecond, and in whole seconds rounded up (for a Retry-After). A burst of 0,
// or above the smallest limit, is an error.
func TestWaitTimeIsExactAndWaitSecondsRoundsUp(t *testing.T) {
	clk := clock.NewManual(t0)
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute, day), WithClock(clk))
	ctx := context.Background()
	for range 60 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	clk.Advance(30*time.Second + 500*time.Millisecond)
	d, err := tr.WaitTime(ctx, "a.example", 1)
	if err != nil || d != 29500*time.Millisecond {
		t.Errorf("WaitTime = %v, %v; want 29.5s", d, err)
	}
	s, err := tr.WaitSeconds(ctx, "a.example", 1)
	if err != nil || s != 30 {
		t.Errorf("WaitSeconds = %d, %v; want 30 (rounded up)", s, err)
	}
	clk.Advance(29500 * time.Millisecond)
	if s, _ := tr.WaitSeconds(ctx, "a.example", 60); s != 0 {
		t.Errorf("WaitSeconds at s+W = %d, want 0", s)
	}
	u, _ := tr.AllocationUsed(ctx, "a.example")
	if u[0].Used != 0 || u[1].Used != 60 || u[1].Remaining != 4940 {
		t.Errorf("usage at s+W: %+v", u)
	}
	if _, err := tr.WaitSeconds(ctx, "a.example", 0); !errors.Is(err, strategy.ErrInvalidBurst) {
		t.Errorf("burst 0: %v", err)
	}
	if _, err := tr.WaitTime(ctx, "a.example", 61); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 61: %v", err)
	}
}

// Wait sleeps on the Transport's clock exactly until the burst fits (the manual clock with
// Auto moves instead of sleeping), and refuses a burst that can never fit.
func TestWaitSleepsUntilTheBurstFits(t *testing.T) {
	clk := &clock.Manual{Auto: true}
	clk.Set(t0)
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(strategy.Rule{Limit: 2, Window: 10 * time.Second}), WithClock(clk))
	ctx := context.Background()
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	if err := tr.Wait(ctx, "a.example", 1); err != nil {
		t.Fatal(err)
	}
	if got := clk.Now().Sub(t0); got != 10*time.Second {
		t.Errorf("Wait slept %v on the clock, want exactly 10s", got)
	}
	if err := tr.Wait(ctx, "a.example", 3); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 3: %v", err)
	}
}

// Wait refuses at once a wait that ends after the context's deadline, saying how long it would
// have been; a Wait cancelled while it sleeps returns context.Canceled and leaves no sleeper.
func TestWaitPastItsDeadlineFailsAtOnceAndCancelReturns(t *testing.T) {
	clk := clock.NewManual(t0) // moves only by hand: a Wait that sleeps blocks
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute), WithClock(clk))
	for range 60 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	// "At once" is "before the deadline": the context still runs when Wait returns, so the
	// check holds however slowly the machine runs (a wait measured against a 30 s deadline).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tr.Wait(ctx, "a.example", 1)
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Wait with a 30s deadline for a 60s wait: %v (context: %v); want DeadlineExceeded at once, before the deadline", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), "need a wait of 1m0s") {
		t.Errorf("message does not say the wait: %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- tr.Wait(ctx, "a.example", 1) }()
	for clk.Sleepers() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Wait: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("cancelled Wait did not return")
	}
	if clk.Sleepers() != 0 {
		t.Error("a cancelled Wait left its sleeper behind")
	}
}

// A cancelled context makes Wait fail even when the burst fits at once.
func TestWaitWithACancelledContextFails(t *testing.T) {
	tr := newTransport(t, nil, WithRules(minute))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.Wait(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context and room: %v", err)
	}
}

package clock

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRealSleepsAtLeastAndStopsOnCancel: the real clock's Sleep never returns early, and
// returns the context's error at once when it is done.
func TestRealSleepsAtLeastAndStopsOnCancel(t *testing.T) {
	c := Real()
	a := c.Now()
	if err := c.Sleep(context.Background(), 2*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := c.Now().Sub(a); d < 2*time.Millisecond {
		t.Errorf("slept %v, want ≥ 2ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Sleep: %v", err)
	}
}

// TestManualSleepWakesOnlyAtDeadline: a Sleep on the manual clock wakes when the clock reaches
// its deadline and not before; Set never moves the clock back; Auto advances instead.
func TestManualSleepWakesOnlyAtDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewManual(t0)
	done := make(chan error)
	go func() { done <- m.Sleep(context.Background(), 10*time.Second) }()
	for m.Sleepers() == 0 {
		time.Sleep(time.Millisecond)
	}
	m.Advance(9 * time.Second)
	select {
	case <-done:
		t.Fatal("woke at 9s of a 10s sleep")
	case <-time.After(20 * time.Millisecond):
	}
	m.Set(t0.Add(10 * time.Second))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m.Set(t0) // never backwards
	if !m.Now().Equal(t0.Add(10 * time.Second)) {
		t.Errorf("Set moved the clock back to %v", m.Now())
	}
	auto := &Manual{Auto: true}
	auto.Sleep(context.Background(), time.Minute)
	if got := auto.Now().Sub(time.Time{}); got != time.Minute {
		t.Errorf("auto clock advanced %v, want 1m", got)
	}
}

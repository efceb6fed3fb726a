package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
)

// learnWaiting returns the requests of key waiting for an answer in a Transport made without
// rules.
func learnWaiting(tr *Transport, key string) int {
	l := tr.learning()
	l.mu.Lock()
	defer l.mu.Unlock()
	if lk := l.keys[key]; lk != nil {
		return lk.waiting
	}
	return 0
}

func awaitLearnWaiting(t *testing.T, tr *Transport, key string, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); learnWaiting(tr, key) != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests of %q wait for the first answer, want %d", learnWaiting(tr, key), key, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLearnedFirstAnswerGate: a paced Transport made without rules sends exactly FirstAnswer
// of 10 requests on a key it has no answer for (1 by default, 3 when set, all 10 when off or
// in monitoring mode); the others wait. The answers (X-RateLimit: 100 a minute, 90 left) teach
// the meter, and the 9 (7) are then charged on it: the meter counts the upstream's 10 used plus
// those sent after, exactly.
func TestLearnedFirstAnswerGate(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, n    int
		paced       bool
		used, after int
	}{
		{"default", 0, 1, true, 10 + 9, 9}, {"FirstAnswer=1", 1, 1, true, 10 + 9, 9},
		{"FirstAnswer=3", 3, 3, true, 10 + 7, 7}, {"off", -1, 10, true, 10, 0}, {"monitoring", 0, 10, false, 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newHeldUpstream()
			opts := []Option{WithClock(clock.NewManual(t0)), WithSync(SyncConfig{FirstAnswer: c.first})}
			if c.paced {
				opts = append(opts, WithPacing())
			}
			tr := newTransport(t, up, opts...)
			wait := gateSend(tr, context.Background(), "up.test", 10)
			probes := up.arrived(t, c.n)
			awaitLearnWaiting(t, tr, "up.test", 10-c.n)
			// The waiters go once every request sent before the key had a meter is answered
			// (their answers say what the upstream counted).
			answerAll(probes, http.StatusOK)
			answerAll(up.arrived(t, c.after), http.StatusOK)
			for i, err := range wait() {
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			st, err := tr.Status(context.Background(), "up.test")
			if err != nil || len(st.Meters) != 1 || st.Meters[0].Rules[0].Used != c.used {
				t.Errorf("status %+v (%v), want one meter with %d used", st, err, c.used)
			}
		})
	}
}

// TestLearnedFirstAnswerGateFailedProbeHandsOn: a first request that fails with a transport
// error is no answer: one waiter goes next, alone, and its answer opens the gate. (A 5xx that
// states limits teaches them, and the waiters are then paced on them.)
func TestLearnedFirstAnswerGateFailedProbeHandsOn(t *testing.T) {
	up := newHeldUpstream()
	tr := newTransport(t, up, WithPacing(), WithClock(clock.NewManual(t0)))
	wait := gateSend(tr, context.Background(), "up.test", 10)
	up.arrived(t, 1)[0].answer <- heldAnswer{err: errors.New("connection reset")}
	awaitLearnWaiting(t, tr, "up.test", 8)
	answerAll(up.arrived(t, 1), http.StatusOK)
	answerAll(up.arrived(t, 8), http.StatusOK)
	failed := 0
	for _, err := range wait() {
		if err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d requests failed, want 1 (the first)", failed)
	}
}

// TestLearnedFirstAnswerGateCancelledWaiter: a waiter whose context ends returns its error and
// sends nothing; the answer still opens the gate for the others.
func TestLearnedFirstAnswerGateCancelledWaiter(t *testing.T) {
	up := newHeldUpstream()
	tr := newTransport(t, up, WithPacing(), WithClock(clock.NewManual(t0)))
	ctx, cancel := context.WithCancel(context.Background())
	first := gateSend(tr, context.Background(), "up.test", 1)
	probe := up.arrived(t, 1)
	cancelled := gateSend(tr, ctx, "up.test", 3)
	others := gateSend(tr, context.Background(), "up.test", 2)
	awaitLearnWaiting(t, tr, "up.test", 5)
	cancel()
	for _, err := range cancelled() {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled waiter returned %v, want context.Canceled", err)
		}
	}
	awaitLearnWaiting(t, tr, "up.test", 2)
	answerAll(probe, http.StatusOK)
	answerAll(up.arrived(t, 2), http.StatusOK)
	for _, err := range append(first(), others()...) {
		if err != nil {
			t.Error(err)
		}
	}
}

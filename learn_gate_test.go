package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
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

// panicOnce panics on its first request, then answers as gateOK.
type panicOnce struct{ n atomic.Int32 }

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.n.Add(1) == 1 {
		panic("base panics")
	}
	return gateOK{}.RoundTrip(r)
}

// TestFirstAnswerProbePanics: a first request whose base RoundTripper panics (the panic goes
// on to the caller, as net/http's server recovers it) hands its place on, with rules and
// without: the next request goes, and is answered.
func TestFirstAnswerProbePanics(t *testing.T) {
	for name, opts := range map[string][]Option{
		"rules":    {WithRules(strategy.Rule{Limit: 100, Window: time.Minute}), WithSync(SyncConfig{XRateLimitWindow: time.Minute})},
		"no rules": nil,
	} {
		t.Run(name, func(t *testing.T) {
			tr := newTransport(t, &panicOnce{}, append(opts, WithPacing(), WithClock(clock.NewManual(t0)))...)
			func() {
				defer func() {
					if recover() == nil {
						t.Error("the panic did not reach the caller")
					}
				}()
				req, _ := http.NewRequest(http.MethodGet, "http://up.test/", nil)
				tr.RoundTrip(req)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for i, err := range gateSend(tr, ctx, "up.test", 3)() {
				if err != nil {
					t.Errorf("request %d after the panic: %v", i, err)
				}
			}
		})
	}
}

// TestNewRefusesStackedLearned: a Transport over another over the same store, one of them made
// without rules, is refused at New (it would count each request twice); over another store it
// is not.
func TestNewRefusesStackedLearned(t *testing.T) {
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	rules := WithRules(strategy.Rule{Limit: 10, Window: time.Minute})
	learned := newTransport(t, gateOK{}, WithStore(mem), WithPacing())
	ruled := newTransport(t, gateOK{}, WithStore(mem), rules)
	for name, c := range map[string]struct {
		base http.RoundTripper
		opts []Option
	}{"learned over learned": {learned, nil}, "ruled over learned": {learned, []Option{rules}}, "learned over ruled": {ruled, nil}} {
		if tr, err := New(c.base, append(c.opts, WithStore(mem))...); err == nil || !strings.Contains(err.Error(), "same store") {
			t.Errorf("%s: New = %v, %v; want an error naming the same store", name, tr, err)
		}
	}
	other, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := New(learned, WithStore(other), WithPacing()); err != nil {
		t.Errorf("learned over learned, another store: %v", err)
	}
}

// TestLearnedRefusalWithoutLimitsPauses: a first answer that is a 429 with Retry-After: 60 and
// no limit fields pauses the key in this process: the 2 requests that waited for it wait 60 s
// more (nothing reaches the upstream before), a request whose deadline comes first returns a
// *DeadlineError at once, and at 60 s the 2 go.
func TestLearnedRefusalWithoutLimitsPauses(t *testing.T) {
	held := newHeldUpstream()
	up := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := held.RoundTrip(req)
		if err == nil {
			resp.Header = http.Header{}
			if resp.StatusCode == http.StatusTooManyRequests {
				resp.Header.Set("Retry-After", "60")
			}
		}
		return resp, err
	})
	clk := clock.NewManual(t0)
	tr := newTransport(t, up, WithPacing(), WithClock(clk))
	wait := gateSend(tr, context.Background(), "up.test", 3)
	probe := held.arrived(t, 1)
	awaitLearnWaiting(t, tr, "up.test", 2)
	answerAll(probe, http.StatusTooManyRequests)
	for deadline := time.Now().Add(5 * time.Second); clk.Sleepers() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests sleep out the pause, want 2", clk.Sleepers())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var de *DeadlineError
	if err := gateSend(tr, ctx, "up.test", 1)()[0]; !errors.As(err, &de) || de.Wait != time.Minute {
		t.Errorf("a request with a 1 s deadline during the pause: %v, want a DeadlineError of 1m0s", err)
	}
	held.arrived(t, 0)
	clk.Advance(time.Minute)
	answerAll(held.arrived(t, 2), http.StatusOK)
	for i, err := range wait() {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
}

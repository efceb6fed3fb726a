package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// heldUpstream holds every request that reaches it until the test answers it.
type heldUpstream struct{ calls chan *heldCall }

type heldCall struct {
	req    *http.Request
	answer chan heldAnswer
}

type heldAnswer struct {
	status int
	err    error
}

// gateOK answers every request at once, with the figures heldUpstream gives.
type gateOK struct{}

func (gateOK) RoundTrip(req *http.Request) (*http.Response, error) {
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "100")
	h.Set("X-RateLimit-Remaining", "90")
	h.Set("X-RateLimit-Reset", "60")
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: req}, nil
}

func newHeldUpstream() *heldUpstream { return &heldUpstream{calls: make(chan *heldCall, 100)} }

func (u *heldUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	c := &heldCall{req: req, answer: make(chan heldAnswer, 1)}
	u.calls <- c
	a := <-c.answer
	if a.err != nil {
		return nil, a.err
	}
	h := http.Header{}
	// 100 a minute, 90 left, resetting in 60 s (X-RateLimit-*, as SyncConfig.XRateLimitWindow reads them).
	h.Set("X-RateLimit-Limit", "100")
	h.Set("X-RateLimit-Remaining", "90")
	h.Set("X-RateLimit-Reset", "60")
	return &http.Response{StatusCode: a.status, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// arrived returns the requests that have reached u and wait for an answer, taking them.
func (u *heldUpstream) arrived(t *testing.T, want int) []*heldCall {
	t.Helper()
	var got []*heldCall
	for len(got) < want {
		select {
		case c := <-u.calls:
			got = append(got, c)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d requests reached the upstream, want %d", len(got), want)
		}
	}
	select {
	case c := <-u.calls:
		t.Fatalf("%d requests reached the upstream (%s among them), want %d", len(got)+1, c.req.URL.Host, want)
	default:
	}
	return got
}

// gateWaiting returns the requests waiting at key's gate, or -1 when the key is known.
func gateWaiting(tr *Transport, key string) int {
	sh := tr.pace.gate.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if sh.knownLocked(key) {
		return -1
	}
	if k == nil {
		return 0
	}
	return k.waiting
}

// awaitWaiting waits until want requests wait at key's gate.
func awaitWaiting(t *testing.T, tr *Transport, key string, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); gateWaiting(tr, key) != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait at the gate of %q, want %d", gateWaiting(tr, key), key, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// gated returns a paced Transport of 100 a minute over base that reads X-RateLimit-* of a
// minute, with SyncConfig.FirstAnswer first, on the manual clock clk.
func gated(t *testing.T, base http.RoundTripper, clk *clock.Manual, first int, opts ...Option) *Transport {
	return newTransport(t, base, append([]Option{WithRules(strategy.Rule{Limit: 100, Window: time.Minute}), WithPacing(),
		WithSync(SyncConfig{XRateLimitWindow: time.Minute, FirstAnswer: first}), WithClock(clk)}, opts...)...)
}

// gateSend sends n GETs to host through tr from n goroutines, and returns their errors, once all
// are done, through wait.
func gateSend(tr http.RoundTripper, ctx context.Context, host string, n int) (wait func() []error) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/", nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			errs[i] = err
		}()
	}
	return func() []error { wg.Wait(); return errs }
}

func answerAll(calls []*heldCall, status int) {
	for _, c := range calls {
		c.answer <- heldAnswer{status: status}
	}
}

// TestFirstAnswerGateLetsNFirst: 10 requests on a key nothing is known of: exactly FirstAnswer
// of them (1 by default, 3 when set) reach the upstream before the first answer, the other 9
// (7) wait at the gate; the answer (90 of 100 left) opens it, and the rest are paced on it: the
// key's count is the upstream's 10 used plus those sent after, exactly.
func TestFirstAnswerGateLetsNFirst(t *testing.T) {
	for _, c := range []struct{ first, n, used int }{{0, 1, 10 + 9}, {1, 1, 10 + 9}, {3, 3, 10 + 7}} {
		t.Run(fmt.Sprintf("FirstAnswer=%d", c.first), func(t *testing.T) {
			up := newHeldUpstream()
			tr := gated(t, up, clock.NewManual(t0), c.first)
			wait := gateSend(tr, context.Background(), "up.test", 10)
			awaitWaiting(t, tr, "up.test", 10-c.n)
			probes := up.arrived(t, c.n)
			answerAll(probes[:1], http.StatusOK)
			rest := up.arrived(t, 10-c.n)
			answerAll(append(probes[1:], rest...), http.StatusOK)
			for i, err := range wait() {
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if w := gateWaiting(tr, "up.test"); w != -1 {
				t.Errorf("the gate still holds %d after the answer, want it open", w)
			}
			u, err := tr.AllocationUsed(context.Background(), "up.test")
			if err != nil || u[0].Used != c.used {
				t.Errorf("the key counts %v (%v), want %d used", u, err, c.used)
			}
		})
	}
}

// TestFirstAnswerGateFailedProbeHandsOn: a first request that fails (a transport error, a 500)
// is no answer: one of the waiters goes next, alone, and its answer opens the gate.
func TestFirstAnswerGateFailedProbeHandsOn(t *testing.T) {
	for _, fail := range []heldAnswer{{err: errors.New("connection reset")}, {status: http.StatusInternalServerError}, {status: http.StatusBadGateway}} {
		t.Run(fmt.Sprint(fail.status, fail.err), func(t *testing.T) {
			up := newHeldUpstream()
			tr := gated(t, up, clock.NewManual(t0), 0)
			wait := gateSend(tr, context.Background(), "up.test", 10)
			awaitWaiting(t, tr, "up.test", 9)
			up.arrived(t, 1)[0].answer <- fail
			awaitWaiting(t, tr, "up.test", 8)
			answerAll(up.arrived(t, 1), http.StatusOK)
			answerAll(up.arrived(t, 8), http.StatusOK)
			failed := 0
			for _, err := range wait() {
				if err != nil {
					failed++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[fail.err != nil]; failed != want {
				t.Errorf("%d requests failed, want %d", failed, want)
			}
		})
	}
}

// TestFirstAnswerGateCancelledWaiter: a waiter whose context is cancelled, or whose deadline
// passes, returns the context's error and sends nothing; it leaves nothing behind (goleak, in
// TestMain), and the probe's answer still opens the gate for the rest.
func TestFirstAnswerGateCancelledWaiter(t *testing.T) {
	up := newHeldUpstream()
	tr := gated(t, up, clock.NewManual(t0), 0)
	wait := gateSend(tr, context.Background(), "up.test", 3)
	awaitWaiting(t, tr, "up.test", 2)
	probe := up.arrived(t, 1)

	ctx, cancel := context.WithCancel(context.Background())
	cancelled := gateSend(tr, ctx, "up.test", 1)
	awaitWaiting(t, tr, "up.test", 3)
	cancel()
	if errs := cancelled(); !errors.Is(errs[0], context.Canceled) {
		t.Errorf("a cancelled waiter returned %v, want context.Canceled", errs[0])
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer dcancel()
	if errs := gateSend(tr, dctx, "up.test", 1)(); !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Errorf("a waiter past its deadline returned %v, want context.DeadlineExceeded", errs[0])
	}
	if w := gateWaiting(tr, "up.test"); w != 2 {
		t.Errorf("%d wait at the gate after the cancelled ones left, want 2", w)
	}
	answerAll(probe, http.StatusOK)
	answerAll(up.arrived(t, 2), http.StatusOK)
	for i, err := range wait() {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
}

// TestFirstAnswerGateKnownInStore: a key another Transport has counted on, over the same store,
// is known: 5 requests all go without waiting for an answer.
func TestFirstAnswerGateKnownInStore(t *testing.T) {
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	other := gated(t, gateOK{}, clk, 0, WithStore(mem))
	req, _ := http.NewRequest(http.MethodGet, "http://up.test/", nil)
	if _, err := other.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	up := newHeldUpstream()
	tr := gated(t, up, clk, 0, WithStore(mem))
	wait := gateSend(tr, context.Background(), "up.test", 5)
	answerAll(up.arrived(t, 5), http.StatusOK)
	wait()
	if w := gateWaiting(tr, "up.test"); w != -1 {
		t.Errorf("gate of a key known in the store: %d waiting, want it open", w)
	}
}

// TestFirstAnswerGateStacked: a gated Transport over another over the same store: the outer
// one's gate lets one request through; the inner one finds it counted in the store, and sends
// it: 1 request reaches the upstream before the first answer, and all 10 after.
func TestFirstAnswerGateStacked(t *testing.T) {
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	up := newHeldUpstream()
	inner := gated(t, up, clk, 0, WithStore(mem))
	outer := gated(t, inner, clk, 0, WithStore(mem))
	wait := gateSend(outer, context.Background(), "up.test", 10)
	awaitWaiting(t, outer, "up.test", 9)
	answerAll(up.arrived(t, 1), http.StatusOK)
	answerAll(up.arrived(t, 9), http.StatusOK)
	for i, err := range wait() {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if w := gateWaiting(inner, "up.test"); w != -1 {
		t.Errorf("the inner gate: %d waiting, want it open", w)
	}
}

// TestFirstAnswerGatePerRequestKey: the gate is the request key's, not a meter's: two request
// keys under one app meter each send their first request, and only those, before an answer.
func TestFirstAnswerGatePerRequestKey(t *testing.T) {
	up := newHeldUpstream()
	tr := gated(t, up, clock.NewManual(t0), 0,
		WithMeter(Meter{Name: "app", AppKey: "app:1", Rules: []strategy.Rule{{Limit: 1000, Window: time.Minute}}}))
	waitA := gateSend(tr, context.Background(), "a.test", 5)
	waitB := gateSend(tr, context.Background(), "b.test", 5)
	awaitWaiting(t, tr, "a.test", 4)
	awaitWaiting(t, tr, "b.test", 4)
	answerAll(up.arrived(t, 2), http.StatusOK)
	answerAll(up.arrived(t, 8), http.StatusOK)
	waitA()
	waitB()
	if sh := tr.pace.gate.shard("app:1"); sh.keys["app:1"] != nil || sh.isKnown("app:1") {
		t.Error("the meter's key has a gate, want none")
	}
}

// TestFirstAnswerGateOnlyPaced: monitoring mode (no WithPacing) holds nothing back, and neither
// does a paced Transport with FirstAnswer -1 or without a reader of remaining counts.
func TestFirstAnswerGateOnlyPaced(t *testing.T) {
	for name, opts := range map[string][]Option{
		"monitoring":     {WithRules(minute), WithSync(SyncConfig{XRateLimitWindow: time.Minute})},
		"FirstAnswer -1": {WithRules(minute), WithPacing(), WithSync(SyncConfig{FirstAnswer: -1})},
		"no reader":      {WithRules(minute), WithPacing(), WithSync(SyncConfig{Readers: []headers.Reader{}})},
	} {
		t.Run(name, func(t *testing.T) {
			up := newHeldUpstream()
			tr := newTransport(t, up, append(opts, WithClock(clock.NewManual(t0)))...)
			if tr.pace.gate != nil {
				t.Fatal("the Transport has a gate")
			}
			wait := gateSend(tr, context.Background(), "up.test", 5)
			answerAll(up.arrived(t, 5), http.StatusOK)
			wait()
		})
	}
}

// TestFirstAnswerGateKnownKeyAllocatesNothing: once a key is known, the gate costs a lookup
// and no allocation.
func TestFirstAnswerGateKnownKeyAllocatesNothing(t *testing.T) {
	tr := gated(t, gateOK{}, clock.NewManual(t0), 0)
	req, _ := http.NewRequest(http.MethodGet, "http://up.test/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		if probe, err := tr.gateEnter(ctx, "up.test"); probe || err != nil {
			t.Fatal(probe, err)
		}
	}); n != 0 {
		t.Errorf("the gate of a known key allocates %v times, want 0", n)
	}
}

// BenchmarkFirstAnswerGate measures the gate of a known key, from parallel goroutines.
func BenchmarkFirstAnswerGate(b *testing.B) {
	tr, err := New(gateOK{},
		WithRules(strategy.Rule{Limit: 100, Window: time.Minute}), WithPacing(), WithSync(SyncConfig{XRateLimitWindow: time.Minute}))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://up.test/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.gateEnter(ctx, "up.test")
		}
	})
}

// TestFirstAnswerGateManyKeys: 5000 keys answered one after another are all known after,
// whether merged into a shard's map or still among its recent keys, and each shard's recent
// keys stay under a quarter of its map: a new key does not copy all the others each time.
func TestFirstAnswerGateManyKeys(t *testing.T) {
	tr := gated(t, gateOK{}, clock.NewManual(t0), 0)
	const n = 5000
	for i := range n {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://k%d.test/", i), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i := range n {
		key := fmt.Sprintf("k%d.test", i)
		if !tr.pace.gate.shard(key).isKnown(key) {
			t.Fatalf("%s is not known after its answer", key)
		}
	}
	total := 0
	for i := range tr.pace.gate.shards {
		sh := &tr.pace.gate.shards[i]
		known, recent := len(*sh.known.Load()), len(sh.recent)
		total += known + recent
		if recent > 0 && recent >= known/4 {
			t.Errorf("shard %d: %d recent keys beside %d merged", i, recent, known)
		}
	}
	if total != n {
		t.Errorf("%d keys kept, want %d", total, n)
	}
}

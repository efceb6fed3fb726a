package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// limitEvents keeps the LimitChanged events an observer saw.
type limitEvents struct {
	mu sync.Mutex
	ev []string
}

func (l *limitEvents) Observe(e observe.Event) {
	if e.Kind != observe.LimitChanged {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev = append(l.ev, e.String())
}

func (l *limitEvents) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ev...)
}

// TestLearnedConcurrentRequestsHoldInFlight: a draft-11 policy in concurrent-requests
// (qu="concurrent-requests", q=3) becomes an in-flight meter. 20 goroutines send 10 requests
// each to a stand-in that holds each request 5 ms (real time): one request goes before anything
// is known (the first-answer gate holds the others); every other one is sent after its answer
// was read and holds one of the 3 slots. None is refused; the stand-in sees 3 in progress at
// most, and 3 at once.
func TestLearnedConcurrentRequestsHoldInFlight(t *testing.T) {
	api := standin.NewIETF(time.Now, standin.IETFPolicy{Name: "conc", Quota: 3, Unit: "concurrent-requests"})
	api.Service = 5 * time.Millisecond
	tr, err := New(handlerTransport{api}, WithPacing())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var mu sync.Mutex
	refusedLater, first := 0, 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for i := range 10 {
				req, _ := http.NewRequest(http.MethodGet, "https://api.example/", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode == http.StatusTooManyRequests {
					if i == 0 {
						first++
					} else {
						refusedLater++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("refused: %d first requests, %d later ones; most in progress %d", first, refusedLater, api.MaxInFlight())
	if first+refusedLater != 0 {
		t.Errorf("%d first requests and %d later ones refused, want none", first, refusedLater)
	}
	if got := api.MaxInFlight(); got != 3 {
		t.Errorf("most in progress at once: %d, want 3", got)
	}
	if n := tr.learning().f.held["ietf:conc:api.example"]; n != 0 {
		t.Errorf("%d slots still held after every body was closed", n)
	}
}

// handlerTransport serves h in process.
type handlerTransport struct{ h http.Handler }

func (h handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.h.ServeHTTP(rec, r)
		resp := rec.Result()
		resp.Request = r
		return resp, nil
	}).RoundTrip(req)
}

// TestLearnedContentBytesChargeBodySize: a draft-11 policy in content-bytes (q=1000 a second)
// charges each request its body size. 20 goroutines send bodies of 250 bytes for 10 s of
// virtual time (4 a second fit; charged 1 each, 20 would go at once and most be refused);
// none sent after the first answer was read is refused, and at least 95 % of the 10 000 bytes
// the 10 windows allow arrive. A body larger than the quota is refused at
// once, sent nowhere: it can never fit.
func TestLearnedContentBytesChargeBodySize(t *testing.T) {
	sim := newLearnSim(t, 10*time.Second)
	api := standin.NewIETF(sim.clk.Now, standin.IETFPolicy{Name: "bytes", Quota: 1000, Window: time.Second, Unit: "content-bytes"})
	var mu sync.Mutex
	bytes := 0
	counting := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		at := sim.clk.Now()
		resp, err := sim.base(api).RoundTrip(r)
		if err == nil && resp.StatusCode == http.StatusOK && at.Before(sim.end) {
			mu.Lock()
			bytes += int(r.ContentLength)
			mu.Unlock()
		}
		return resp, err
	})
	tr, err := New(counting, WithStore(sim.store), WithPacing())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sim.drive(t, tr, 20, func(ctx context.Context, i int) *http.Request {
		body := strings.Repeat("x", 250)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.example/upload", strings.NewReader(body))
		return req
	})
	share := 100 * float64(bytes) / 10_000
	t.Logf("10 s virtual: %d bytes accepted (%.1f %% of 10000); refused: %d of the %d sent after the first answer was read, %d of the %d before",
		bytes, share, sim.refusedAfter.Load(), sim.after.Load(), sim.refusedUnmetered.Load(), sim.unmetered.Load())
	if sim.refusedAfter.Load() != 0 {
		t.Errorf("%d refused after the first answer, want 0", sim.refusedAfter.Load())
	}
	sim.firstAnswerOnly(t, 1)
	if share < 95 || bytes > 10_000 {
		t.Errorf("%d bytes accepted, %.1f %%: want at least 95 %% of 10000, and no more", bytes, share)
	}
	big, _ := http.NewRequest(http.MethodPost, "https://api.example/upload", strings.NewReader(strings.Repeat("x", 1001)))
	if _, err := tr.RoundTrip(big); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("a body of 1001 bytes on a quota of 1000: %v, want ErrBurstTooLarge", err)
	}
}

// TestLearnedPolicyChangesAtRunTime: the stand-in's minute policy (per partition key) drops
// from 100 to 50 at the start of the second minute. The Transport learns the change from the
// first answer after it, reports it (observe.LimitChanged, Op "learned", with the new rule),
// and paces on it: no request sent after the first answer is refused, and the second minute
// takes 50.
func TestLearnedPolicyChangesAtRunTime(t *testing.T) {
	sim := newLearnSim(t, 2*time.Minute)
	api := standin.NewIETF(sim.clk.Now, ietfPolicies()...)
	events := &limitEvents{}
	tr, err := New(sim.base(api), WithStore(sim.store), WithPacing(), WithObserver(events))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	lowered := ietfPolicies()
	lowered[1].Quota = 50
	var once sync.Once
	sim.drive(t, tr, 20, func(ctx context.Context, i int) *http.Request {
		if !sim.clk.Now().Before(t0.Add(time.Minute)) {
			once.Do(func() { api.SetPolicies(lowered...) })
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/items", nil)
		return req
	})
	t.Logf("%d accepted; refused: %d of the %d sent after the first answer was read; events %q", sim.accepted.Load(), sim.refusedAfter.Load(), sim.after.Load(), events.list())
	if sim.refusedAfter.Load() != 0 {
		t.Errorf("%d refused after the first answer, want 0", sim.refusedAfter.Load())
	}
	if n := sim.accepted.Load(); n < 100+48 || n > 150 {
		t.Errorf("%d accepted in the 2 minutes, want 100 + 50 (at least 95 %%)", n)
	}
	pk := "ietf:minute:pk:YWNjdC0x" // base64 of acct-1
	want := []string{
		"limit_changed op=learned key=ietf:burst:api.example 10/1s:0/10",
		"limit_changed op=learned key=" + pk + " 100/1m0s:0/100",
		"limit_changed op=learned key=" + pk + " 50/1m0s:0/50",
	}
	if got := events.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}

// TestLearnedXRateLimitWindowFromReset: X-RateLimit-Limit with a reset, and no IETF fields,
// becomes a meter ("x-ratelimit") whose window is the smallest of the learned windows that
// holds the reset: an upstream of 5 requests per fixed 10 s that answers with a delta reset is
// paced at 5 per 10 s, none refused after the first answer, 15 in 30 s.
func TestLearnedXRateLimitWindowFromReset(t *testing.T) {
	sim := newLearnSim(t, 30*time.Second)
	var mu sync.Mutex
	var start time.Time
	used := 0
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		now := sim.clk.Now()
		if s := time.Unix(now.Unix()-now.Unix()%10, 0); !s.Equal(start) {
			start, used = s, 0
		}
		ok := used < 5
		if ok {
			used++
		}
		h := w.Header()
		h.Set("X-RateLimit-Limit", "5")
		h.Set("X-RateLimit-Remaining", strconv.Itoa(5-used))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(start.Add(10*time.Second).Sub(now)/time.Second), 10))
		if !ok {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	tr, err := New(sim.base(api), WithStore(sim.store), WithPacing())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sim.drive(t, tr, 3, func(ctx context.Context, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/", nil)
		return req
	})
	t.Logf("%d accepted; refused %d of the %d sent after the first answer was read", sim.accepted.Load(), sim.refusedAfter.Load(), sim.after.Load())
	if sim.refusedAfter.Load() != 0 || sim.accepted.Load() != 15 {
		t.Errorf("%d accepted, %d refused after the first answer; want 15 and 0", sim.accepted.Load(), sim.refusedAfter.Load())
	}
	l := tr.learning()
	if m := l.keys["api.example"].meters[0]; m.name != "x-ratelimit" || m.rules[0] != (strategy.Rule{Limit: 5, Window: 10 * time.Second}) {
		t.Errorf("learned %s %v, want x-ratelimit [5/10s]", m.name, m.rules)
	}
	for _, c := range []struct{ reset, want time.Duration }{
		{time.Second, time.Second}, {7 * time.Second, 10 * time.Second}, {59 * time.Second, time.Minute},
		{3599 * time.Second, time.Hour}, {25 * time.Hour, 25 * time.Hour},
	} {
		if got := windowFor(c.reset); got != c.want {
			t.Errorf("windowFor(%v) = %v, want %v", c.reset, got, c.want)
		}
	}
}

// TestSetMeterAtRunTime: SetMeter gives a Transport made without rules a meter at run time,
// reported as observe.LimitChanged (Op "set"), paced on at once; a second SetMeter of that
// name replaces it. A Transport with rules refuses SetMeter.
func TestSetMeterAtRunTime(t *testing.T) {
	clk := clock.NewManual(t0)
	mem, _ := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	defer mem.Close()
	events := &limitEvents{}
	tr, err := New(&recorder{resp: &http.Response{StatusCode: 200, Body: http.NoBody}}, WithStore(mem), WithPacing(), WithObserver(events))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	send := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second) // real time: a wait of a minute passes it
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/", nil)
		_, err := tr.RoundTrip(req)
		return err
	}
	if err := tr.SetMeter(Meter{Name: "mine", Rules: []strategy.Rule{{Limit: 2, Window: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := send(); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	var de *DeadlineError
	if err := send(); !errors.As(err, &de) || de.Meter != "mine" || de.Wait != time.Minute {
		t.Fatalf("third request in the minute: %v, want a DeadlineError of meter mine, 1m0s", err)
	}
	if err := tr.SetMeter(Meter{Name: "mine", Rules: []strategy.Rule{{Limit: 3, Window: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	if err := send(); err != nil {
		t.Errorf("after raising the meter to 3: %v", err)
	}
	want := []string{"limit_changed op=set key= 2/1m0s:0/2", "limit_changed op=set key= 3/1m0s:0/3"}
	if got := events.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
	ruled := newTransport(t, &recorder{}, WithRules(minute))
	if err := ruled.SetMeter(Meter{Name: "x", Rules: []strategy.Rule{minute}}); err == nil {
		t.Error("SetMeter on a Transport with rules: accepted")
	}
	if err := tr.SetMeter(Meter{Name: "bad"}); err == nil {
		t.Error("SetMeter of a meter without limits: accepted")
	}
}

// TestLearnedFromDraftB2Examples: the answers of draft-11's appendix B.2.2 and B.2.3, in turn.
// The first states "dynamic";q=100;w=60 with r=9, t=50: the meter is 100 a minute, 91 of them
// used (usage raised to q − r) until the window ends 50 s on. The second, a 429, states
// q=15;w=20 with r=0, t=20: the meter becomes 15 per 20 s, reported, and is paused 20 s.
func TestLearnedFromDraftB2Examples(t *testing.T) {
	clk := clock.NewManual(t0)
	mem, _ := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	defer mem.Close()
	answers := []struct {
		status         int
		policy, limits string
	}{
		{200, `"dynamic";q=100;w=60`, `"dynamic";r=9;t=50`},
		{429, `"dynamic";q=15;w=20`, `"dynamic";r=0;t=20`},
	}
	i := 0
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		a := answers[i]
		i++
		h := http.Header{}
		h.Set("RateLimit-Policy", a.policy)
		h.Set("RateLimit", a.limits)
		return &http.Response{StatusCode: a.status, Header: h, Body: http.NoBody, Request: r}, nil
	})
	events := &limitEvents{}
	tr, err := New(base, WithStore(mem), WithObserver(events))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	get := func() {
		req, _ := http.NewRequest(http.MethodGet, "https://api.example/items/123", nil)
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	get()
	st, err := tr.Status(context.Background(), "api.example")
	if err != nil || len(st.Meters) != 1 {
		t.Fatalf("after B.2.2: %+v, %v", st, err)
	}
	if u := st.Meters[0].Rules[0]; u.Rule != (strategy.Rule{Limit: 100, Window: time.Minute}) || u.Used != 91 || u.Reported != 9 {
		t.Errorf("after B.2.2: %+v, want 100/1m0s with 91 used and 9 reported", u)
	}
	clk.Advance(10 * time.Second) // "the client waits 10 seconds"
	get()                         // monitoring: charged 1 on 100/1m0s, then answered by B.2.3's 429
	st, err = tr.Status(context.Background(), "api.example")
	if err != nil || len(st.Meters) != 1 {
		t.Fatalf("after B.2.3: %+v, %v", st, err)
	}
	m := st.Meters[0]
	if m.Rules[0].Rule != (strategy.Rule{Limit: 15, Window: 20 * time.Second}) || !m.PausedUntil.Equal(clk.Now().Add(20*time.Second)) || m.Wait != 20*time.Second {
		t.Errorf("after B.2.3: %+v, want 15/20s paused until 20 s on", m)
	}
	want := []string{"limit_changed op=learned key=ietf:dynamic:api.example 100/1m0s:0/100",
		"limit_changed op=learned key=ietf:dynamic:api.example 15/20s:0/15"}
	if got := events.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}

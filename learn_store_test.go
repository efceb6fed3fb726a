package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// plain strips the rate-limit fields of base's answers: a Transport over it learns nothing
// from its own answers.
type plain struct{ base http.RoundTripper }

func (p plain) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(req)
	if err == nil {
		resp.Header = http.Header{}
	}
	return resp, err
}

// policyUpstream answers every request with one draft-11 policy "minute" of q a minute and r
// left, counting the requests that reach it.
type policyUpstream struct {
	q, r atomic.Int64
	sent atomic.Int64
}

func (u *policyUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.sent.Add(1)
	h := http.Header{}
	h.Set("RateLimit-Policy", fmt.Sprintf(`"minute";q=%d;w=60`, u.q.Load()))
	h.Set("RateLimit", fmt.Sprintf(`"minute";r=%d;t=60`, u.r.Load()))
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: req}, nil
}

// meterFigures returns key's meters on tr as "name key rule used" strings.
func meterFigures(t *testing.T, tr *Transport, key string) string {
	t.Helper()
	st, err := tr.Status(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range st.Meters {
		got = append(got, fmt.Sprintf("%s %s %v used %d", m.Meter, m.Key, m.Rules[0].Rule, m.Rules[0].Used))
	}
	return strings.Join(got, "; ")
}

// TestLearnedLimitsInTheStore: two Transports made without rules over one store (two
// processes). A learns "minute" (100 a minute, 90 left) from its answer and writes it to the
// store; B, whose answers state nothing, reads it on its first request: its 10 requests go at
// once, charged on the meter, with no answer of its own (the first-answer gate finds the
// store's state). A learns 50 a minute: B still paces on 100 9 s later, on 50 at 10 s. A's
// SetMeter reaches B by 10 s too, reported with Op "shared".
func TestLearnedLimitsInTheStore(t *testing.T) {
	clk := clock.NewManual(t0)
	mem := newMem(t, clk)
	upA := &policyUpstream{}
	upA.q.Store(100)
	upA.r.Store(90)
	var evB limitEvents
	a := newTransport(t, upA, WithStore(mem), WithPacing(), WithClock(clk))
	held := newHeldUpstream()
	b := newTransport(t, plain{held}, WithStore(mem), WithPacing(), WithClock(clk), WithObserver(&evB))
	send := func(tr *Transport) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://api.example/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send(a)
	wait := gateSend(b, context.Background(), "api.example", 10)
	answerAll(held.arrived(t, 10), http.StatusOK)
	for _, err := range wait() {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, want := meterFigures(t, b, "api.example"), "ietf:minute ietf:minute:api.example 100/1m0s used 20"; got != want {
		t.Errorf("B's meters: %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(evB.list()), "[limit_changed op=shared key=ietf:minute:api.example 100/1m0s:0/100]"; got != want {
		t.Errorf("B's events: %s, want %s", got, want)
	}

	// From here B's upstream answers at once.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range held.calls {
			c.answer <- heldAnswer{status: http.StatusOK}
		}
	}()
	defer func() { close(held.calls); <-done }()
	upA.q.Store(50)
	upA.r.Store(25)
	send(a)
	clk.Advance(9 * time.Second)
	if got := b.learnedRule(t, "api.example"); got != "100/1m0s" {
		t.Errorf("B 9 s after A learned 50 a minute: %s, want 100/1m0s", got)
	}
	clk.Advance(time.Second)
	if got := b.learnedRule(t, "api.example"); got != "50/1m0s" {
		t.Errorf("B 10 s after A learned 50 a minute: %s, want 50/1m0s", got)
	}

	if err := a.SetMeter(Meter{Name: "burst", Rules: []strategy.Rule{{Limit: 5, Window: time.Second}}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	send(b)
	// On "minute": the 25 A's answer said were used, and B's 3 requests since.
	if got, want := meterFigures(t, b, "api.example"), "burst burst:api.example 5/1s used 1; ietf:minute ietf:minute:api.example 50/1m0s used 28"; got != want {
		t.Errorf("B's meters after A's SetMeter: %s, want %s", got, want)
	}
	if ev := evB.list(); !strings.Contains(ev[len(ev)-1], "op=shared key= 5/1s") {
		t.Errorf("B's last event %q, want the shared set meter burst 5/1s", ev[len(ev)-1])
	}
}

// learnedRule sends one request on key through tr (reading the store when due) and returns the
// rule of its first meter.
func (tr *Transport) learnedRule(t *testing.T, key string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://"+key+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	l := tr.learning()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys[key].meters[0].rules[0].String()
}

// TestSetMeterNotShared: SetMeter over a store that fails sets the meter in this process and
// says the store could not share it.
func TestSetMeterNotShared(t *testing.T) {
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, gateOK{}, WithStore(mem), WithPacing())
	mem.Close()
	err = tr.SetMeter(Meter{Name: "burst", Rules: []strategy.Rule{{Limit: 5, Window: time.Second}}})
	if !errors.Is(err, errNotShared) || !errors.Is(err, cache.ErrClosed) {
		t.Errorf("SetMeter over a closed store: %v, want errNotShared wrapping cache.ErrClosed", err)
	}
	if l := tr.learning(); len(l.set) != 1 || l.set[0].name != "burst" {
		t.Errorf("meters set: %v, want burst", l.set)
	}
}

// TestLearnedLimitsBadStoreValues: values in the store that no Transport could have written
// (not JSON, a unit of no draft, a limit of 0, a negative in-flight limit, a set meter with no
// rules) are ignored: the key's first request goes as for a key nothing is known of, and
// learns from its answer.
func TestLearnedLimitsBadStoreValues(t *testing.T) {
	for name, v := range map[string]string{
		"not JSON":   `{"at":`,
		"bad unit":   `{"at":9e18,"meters":[{"name":"ietf:x","key":"ietf:x:api.example","unit":"parsecs","rules":[{"Limit":5,"Window":1000000000}]}]}`,
		"limit 0":    `{"at":9e18,"meters":[{"name":"ietf:x","key":"ietf:x:api.example","unit":"requests","rules":[{"Limit":0,"Window":1000000000}]}]}`,
		"inflight<0": `{"at":9e18,"meters":[{"name":"ietf:x","key":"ietf:x:api.example","unit":"concurrent-requests","inflight":-1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			mem := newMem(t, clk)
			ctx := context.Background()
			if err := mem.PutLimits(ctx, limitsPrefix+"api.example", []byte(v), 0); err != nil {
				t.Fatal(err)
			}
			if err := mem.PutLimits(ctx, setLimitsKey, []byte(`{"at":9e18,"meters":[{"name":"s"}]}`), 0); err != nil {
				t.Fatal(err)
			}
			up := &policyUpstream{}
			up.q.Store(100)
			up.r.Store(99)
			tr := newTransport(t, up, WithStore(mem), WithPacing(), WithClock(clk))
			if got := tr.learnedRule(t, "api.example"); got != "100/1m0s" {
				t.Errorf("learned %s, want 100/1m0s", got)
			}
			if n := len(tr.learning().set); n != 0 {
				t.Errorf("%d meters set from a set meter with no rules, want 0", n)
			}
		})
	}
}

// TestLearnedLimitsRefreshAfterClockStepsBack: a clock stepped back 30 minutes does not put off
// the next read of the store for that time: the next request reads what another Transport,
// whose clock did not step, wrote.
func TestLearnedLimitsRefreshAfterClockStepsBack(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	mem := newMem(t, clk)
	tr := newTransport(t, plain{gateOK{}}, WithStore(mem), WithPacing(), WithClock(clk))
	put := func(limit int, at time.Time) {
		v := fmt.Sprintf(`{"at":%d,"meters":[{"name":"ietf:m","key":"ietf:m:api.example","unit":"requests","rules":[{"Limit":%d,"Window":60000000000}]}]}`, at.UnixNano(), limit)
		if err := mem.PutLimits(context.Background(), limitsPrefix+"api.example", []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	put(100, t0)
	if got := tr.learnedRule(t, "api.example"); got != "100/1m0s" {
		t.Fatalf("first read: %s, want 100/1m0s", got)
	}
	clk.Step(-30 * time.Minute)
	put(50, t0.Add(time.Second))
	if got := tr.learnedRule(t, "api.example"); got != "50/1m0s" {
		t.Errorf("after the clock stepped back 30 min: %s, want 50/1m0s", got)
	}
}

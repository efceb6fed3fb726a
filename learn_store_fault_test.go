package ratemonitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// limitsFaults is a memory store whose Limits panics once when armed, or blocks until release
// (or its context ends) when release is set.
type limitsFaults struct {
	*cache.Memory
	panicOnce atomic.Bool
	release   chan struct{}
}

func (s *limitsFaults) Limits(ctx context.Context, key string) ([]byte, error) {
	if s.panicOnce.CompareAndSwap(true, false) {
		panic("the store's Limits panics")
	}
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Memory.Limits(ctx, key)
}

func sendTo(tr *Transport, ctx context.Context, host string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/", nil)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func newMem(t *testing.T, clk clock.Clock) *cache.Memory {
	t.Helper()
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem
}

func putStored(t *testing.T, mem *cache.Memory, key string, v storedLimits) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.PutLimits(context.Background(), key, b, 0); err != nil {
		t.Fatal(err)
	}
}

// TestLearnedLimitsLoadPanics: a store whose Limits panics during a key's first read (the
// panic reaches the caller) does not leave the key's other requests waiting for that read: the
// next request goes.
func TestLearnedLimitsLoadPanics(t *testing.T) {
	st := &limitsFaults{Memory: newMem(t, nil)}
	tr := newTransport(t, gateOK{}, WithStore(st), WithPacing())
	st.panicOnce.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the store's panic did not reach the caller")
			}
		}()
		sendTo(tr, context.Background(), "api.example")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sendTo(tr, ctx, "api.example"); err != nil {
		t.Errorf("the next request: %v, want it sent", err)
	}
}

// TestLearnedLimitsSlowStore: the request that reads a key's limits from a store that does not
// answer returns when its context ends, with the context's error, and sends nothing.
func TestLearnedLimitsSlowStore(t *testing.T) {
	st := &limitsFaults{Memory: newMem(t, nil), release: make(chan struct{})}
	defer close(st.release)
	var sent atomic.Int64
	up := roundTripFunc(func(r *http.Request) (*http.Response, error) { sent.Add(1); return gateOK{}.RoundTrip(r) })
	tr := newTransport(t, up, WithStore(st), WithPacing())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := sendTo(tr, ctx, "api.example"); !errors.Is(err, context.DeadlineExceeded) || sent.Load() != 0 {
		t.Errorf("a request whose deadline passed while the store was read: %v, %d sent; want the deadline's error, none sent", err, sent.Load())
	}
}

// TestLearnedLimitsStoredDuplicates: a stored value naming one meter 9 times, or 10 000 set
// meters, gives one meter of that name (charged once a request), and at most maxMeters set.
func TestLearnedLimitsStoredDuplicates(t *testing.T) {
	clk := clock.NewManual(t0)
	mem := newMem(t, clk)
	sm := storedMeter{Name: "ietf:minute", Key: "ietf:minute:api.example", Unit: unitRequests,
		Rules: []strategy.Rule{{Limit: 100, Window: time.Minute}}}
	v := storedLimits{At: t0.UnixNano()}
	for range 9 {
		v.Meters = append(v.Meters, sm)
	}
	putStored(t, mem, limitsPrefix+"api.example", v)
	set := storedLimits{At: t0.UnixNano()}
	for i := range 10_000 {
		set.Meters = append(set.Meters, storedMeter{Name: fmt.Sprint("m", i), Rules: []strategy.Rule{{Limit: 1_000_000, Window: time.Second}}})
	}
	putStored(t, mem, setLimitsKey, set)
	tr := newTransport(t, plain{gateOK{}}, WithStore(mem), WithPacing(), WithClock(clk))
	if err := sendTo(tr, context.Background(), "api.example"); err != nil {
		t.Fatal(err)
	}
	if got := tr.learnedNames("api.example"); got != "ietf:minute" {
		t.Errorf("learned %q, want one ietf:minute", got)
	}
	st, err := tr.Status(context.Background(), "api.example")
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Meters[len(st.Meters)-1]; m.Meter != "ietf:minute" || m.Rules[0].Used != 1 {
		t.Errorf("last meter %s used %d, want ietf:minute used 1", m.Meter, m.Rules[0].Used)
	}
	if n := len(tr.learning().set); n != maxMeters {
		t.Errorf("%d meters set from the store, want %d", n, maxMeters)
	}
}

// TestLearnedLimitsFromTheFutureIgnored: a stored value dated past this clock by more than
// limitsAhead (a writer's clock far ahead, or a value no Transport wrote) is not read: the
// key learns from its answers, and a value a Transport writes later is read.
func TestLearnedLimitsFromTheFutureIgnored(t *testing.T) {
	clk := clock.NewManual(t0)
	mem := newMem(t, clk)
	putStored(t, mem, limitsPrefix+"api.example", storedLimits{At: math.MaxInt64, Meters: []storedMeter{{
		Name: "ietf:evil", Key: "ietf:evil:api.example", Unit: unitRequests, Rules: []strategy.Rule{{Limit: 1, Window: 24 * time.Hour}}}}})
	up := &policyUpstream{}
	up.q.Store(100)
	up.r.Store(99)
	tr := newTransport(t, up, WithStore(mem), WithPacing(), WithClock(clk))
	for i := range 3 {
		if err := sendTo(tr, context.Background(), "api.example"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := tr.learnedNames("api.example"); got != "ietf:minute" {
		t.Errorf("learned %q, want ietf:minute alone", got)
	}
}

// TestSetMeterKeepsOthersSet: A sets "a", then B sets "b", over one store: both end with
// [a b] (each SetMeter starts from the store's set), and B's meter b keeps its Cost there: a
// request through each charges b 1 + 2.
func TestSetMeterKeepsOthersSet(t *testing.T) {
	clk := clock.NewManual(t0)
	mem := newMem(t, clk)
	a := newTransport(t, gateOK{}, WithStore(mem), WithPacing(), WithClock(clk))
	b := newTransport(t, gateOK{}, WithStore(mem), WithPacing(), WithClock(clk))
	if err := a.SetMeter(Meter{Name: "a", Rules: []strategy.Rule{{Limit: 5, Window: time.Second}}}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMeter(Meter{Name: "b", Rules: []strategy.Rule{{Limit: 7, Window: time.Second}}, Cost: func(*http.Request) int { return 2 }}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(limitsRefresh)
	for name, tr := range map[string]*Transport{"A": a, "B": b} {
		if err := sendTo(tr, context.Background(), "api.example"); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range tr.learning().set {
			names = append(names, m.name)
		}
		if got := strings.Join(names, " "); got != "a b" {
			t.Errorf("%s's set meters: %q, want \"a b\"", name, got)
		}
	}
	st, err := b.Status(context.Background(), "api.example")
	if err != nil || st.Meters[1].Meter != "b" || st.Meters[1].Rules[0].Used != 3 {
		t.Errorf("meter b: %+v (%v), want used 3 (A's 1, B's 2 by its Cost)", st.Meters, err)
	}
}

// TestNewStackedNotComparableStore: New over a Transport whose store is of a type Go cannot
// compare (a struct with a map) returns, without a panic.
func TestNewStackedNotComparableStore(t *testing.T) {
	type tagged struct {
		*cache.Memory
		tags map[string]string
	}
	st := tagged{Memory: newMem(t, nil), tags: map[string]string{}}
	in := newTransport(t, gateOK{}, WithStore(st), WithPacing())
	out, err := New(in, WithStore(st), WithPacing())
	if err == nil {
		out.Close()
	}
}

// flipping answers with a minute policy whose quota changes each time, and one of three
// one-second policies.
type flipping struct{ n atomic.Int64 }

func (u *flipping) RoundTrip(req *http.Request) (*http.Response, error) {
	n := u.n.Add(1)
	q := 100_000 + n%7
	h := http.Header{}
	h.Set("RateLimit-Policy", fmt.Sprintf(`"minute";q=%d;w=60, "sec%d";q=%d;w=1`, q, n%3, q))
	h.Set("RateLimit", fmt.Sprintf(`"minute";r=%d;t=60`, q-1))
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: req}, nil
}

// TestLearnedLimitsSharedUnderChurn: two Transports over one store, 16 goroutines on 40 keys,
// policies changing at every answer, SetMeter called in both and bad values written to the
// store meanwhile: every request is sent (none waits past its second), with no race.
func TestLearnedLimitsSharedUnderChurn(t *testing.T) {
	mem := newMem(t, nil)
	a := newTransport(t, &flipping{}, WithStore(mem), WithPacing())
	b := newTransport(t, &flipping{}, WithStore(mem), WithPacing())
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for i := range 150 {
				tr := a
				if (g+i)%2 == 0 {
					tr = b
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := sendTo(tr, ctx, fmt.Sprintf("k%d.example", (g*7+i)%40)); err != nil && failed.Add(1) == 1 {
					t.Error(err)
				}
				cancel()
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			tr := a
			if i%2 == 0 {
				tr = b
			}
			tr.SetMeter(Meter{Name: fmt.Sprint("set", i%3), Rules: []strategy.Rule{{Limit: 1_000_000 + i, Window: time.Second}}})
			mem.PutLimits(context.Background(), setLimitsKey, []byte(`{"at":1,"meters":[{"name":"x","rules":[{"Limit":0,"Window":-5}]}]}`), 0)
			mem.PutLimits(context.Background(), limitsPrefix+"k3.example", []byte(`garbage`), 0)
		}
	})
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d requests failed", n)
	}
}

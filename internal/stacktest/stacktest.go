// Package stacktest is the stacking tests of Transports, run by the core over the memory store
// and by the Redis module over the Redis store (which reach it through the core's path
// prefix): Transports stacked on one shared store and key count each attempt once per
// counter, and counters of the same window must have the same shape. Each function is one
// test; newStore makes a new, empty store at each call.
package stacktest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/transportcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

var (
	minute = strategy.Rule{Limit: 60, Window: time.Minute}
	// day10 is Xero's day rule in 10 s buckets, which the Redis store accepts.
	day10 = strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}
	// usedOf is transportcheck's, under the name the tests were written with.
	usedOf = transportcheck.UsedOf
)

func newTransport(t *testing.T, base http.RoundTripper, opts ...ratemonitor.Option) *ratemonitor.Transport {
	t.Helper()
	return transportcheck.New(t, ratemonitor.New, base, opts...)
}

// retryTwice sends every request twice through next, as a retrying RoundTripper placed between
// two Transports does: each attempt reaches the base, so each is counted.
type retryTwice struct{ next http.RoundTripper }

func (r retryTwice) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return r.next.RoundTrip(req)
}

// failover sends the request to primary and, when that fails, to fallback: two Transports
// below one outer Transport, each with a base of its own, the way a failover or hedging
// RoundTripper placed between layers works. Both attempts reach a base, so both are counted.
type failover struct{ primary, fallback http.RoundTripper }

func (f failover) RoundTrip(req *http.Request) (*http.Response, error) {
	if resp, err := f.primary.RoundTrip(req); err == nil {
		return resp, nil
	}
	return f.fallback.RoundTrip(req)
}

// StackedFailoverCountsEveryAttempt: an outer Transport (60/1m) over a failover between two
// inner Transports (60/1m and 5000/24h) on one store and key. The primary's base fails, the
// fallback's succeeds: two attempts reached a base, so the shared minute counter must say 2.
// Before the fix a mark was used once per inner Transport, so both inner Transports skipped
// the minute counter the outer one had counted once: used [1 2].
func StackedFailoverCountsEveryAttempt(t *testing.T, newStore func() cache.Store) {
	st := newStore()
	var reached int
	down := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		reached++
		return nil, errors.New("primary down")
	})
	ok := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		reached++
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	key := func(*http.Request) string { return "k" }
	primary := newTransport(t, down, ratemonitor.WithRules(minute, day10), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(key))
	fallback := newTransport(t, ok, ratemonitor.WithRules(minute, day10), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(key))
	outer := newTransport(t, failover{primary, fallback}, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(key))
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.invalid/", nil)
	resp, err := outer.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if reached != 2 {
		t.Fatalf("bases reached %d times, want 2", reached)
	}
	if u := usedOf(t, fallback, "k"); !slices.Equal(u, []int{2, 2}) {
		t.Errorf("used %v after 2 attempts, want [2 2]", u)
	}
}

// StackedThreeLayersRetry: A (minute) → retry twice → B (hour) → C (minute, hour), one store
// and key. Two attempts reach C's base. The first is counted by A in the minute counter and by B
// in the hour one, which C must skip, both; the second, a new attempt below A, is counted by B
// (hour) and by C in the minute counter only. used [2 2].
func StackedThreeLayersRetry(t *testing.T, newStore func() cache.Store) {
	st := newStore()
	ok := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	hour := strategy.Rule{Limit: 1000, Window: time.Hour}
	key := func(*http.Request) string { return "k" }
	c := newTransport(t, ok, ratemonitor.WithRules(minute, hour), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(key))
	b := newTransport(t, c, ratemonitor.WithRules(hour), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(key))
	a := newTransport(t, retryTwice{b}, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(key))
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.invalid/", nil)
	resp, err := a.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u := usedOf(t, c, "k"); !slices.Equal(u, []int{2, 2}) {
		t.Errorf("used %v after 2 attempts, want [2 2]", u)
	}
}

// StackedInnerReservation: a Reservation of the inner Transport carried through an outer
// one. The attempt spends the reservation's slot, recorded in both of the inner's counters by
// Reserve; the outer Transport records it again in the shared minute counter, so the inner one
// gives the reservation's slot back there: one attempt, used [1 1]. Before the fix, used
// [2 1]. When the outer Transport counts every counter of the inner one, the slot is spent
// and given back all the same: used [1], nothing left reserved (before: [2], the slot still
// held).
func StackedInnerReservation(t *testing.T, newStore func() cache.Store) {
	st := newStore()
	ok := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	send := func(outer *ratemonitor.Transport, r *ratemonitor.Reservation) {
		t.Helper()
		req, _ := http.NewRequestWithContext(r.Context(context.Background()), http.MethodGet, "http://upstream.invalid/", nil)
		resp, err := outer.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	inner := newTransport(t, ok, ratemonitor.WithRules(minute, day10), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }))
	outer := newTransport(t, inner, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }))
	r, err := inner.Reserve(context.Background(), "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	send(outer, r)
	if u := usedOf(t, inner, "k"); !slices.Equal(u, []int{1, 1}) || r.Remaining() != 0 {
		t.Errorf("overlapping: used %v after 1 attempt on a reservation of 1, want [1 1] (remaining %d, want 0)", u, r.Remaining())
	}

	inner2 := newTransport(t, ok, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(func(*http.Request) string { return "k2" }))
	outer2 := newTransport(t, inner2, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithKeyFunc(func(*http.Request) string { return "k2" }))
	r2, err := inner2.Reserve(context.Background(), "k2", 1)
	if err != nil {
		t.Fatal(err)
	}
	send(outer2, r2)
	if u := usedOf(t, inner2, "k2"); !slices.Equal(u, []int{1}) || r2.Remaining() != 0 {
		t.Errorf("all counted outside: used %v after 1 attempt on a reservation of 1, want [1] (remaining %d, want 0)", u, r2.Remaining())
	}
}

// StackedTransportsCountOnce is issue 13's defect 1: an outer Transport wrapping an inner
// one on the same key and store counts each attempt once per counter, however the rules of the
// two layers overlap, in monitoring and in pacing mode.
func StackedTransportsCountOnce(t *testing.T, newStore func() cache.Store) {
	hour := strategy.Rule{Limit: 1000, Window: time.Hour}
	st := newStore()
	up, hits := upstreamtest.Counting(t, nil)
	key := strings.TrimPrefix(up.URL, "http://")

	// Same rules in both layers: one request is used = 1 in both rules.
	inner := newTransport(t, nil, ratemonitor.WithRules(minute, day10), ratemonitor.WithStore(st))
	outer := newTransport(t, inner, ratemonitor.WithRules(minute, day10), ratemonitor.WithStore(st))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: outer}, up.URL); err != nil {
		t.Fatal(err)
	}
	if u := usedOf(t, outer, key); !slices.Equal(u, []int{1, 1}) {
		t.Errorf("same rules: used %v, want [1 1]", u)
	}

	// Overlapping rules: the minute counter is shared, the day and hour ones are not.
	inner2 := newTransport(t, nil, ratemonitor.WithRules(minute, hour), ratemonitor.WithStore(st))
	outer2 := newTransport(t, inner2, ratemonitor.WithRules(minute, day10), ratemonitor.WithStore(st))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: outer2}, up.URL); err != nil {
		t.Fatal(err)
	}
	if u := usedOf(t, inner2, key); !slices.Equal(u, []int{2, 1}) {
		t.Errorf("overlapping rules: inner used %v, want [2 1]", u)
	}
	if u := usedOf(t, outer2, key); !slices.Equal(u, []int{2, 2}) {
		t.Errorf("overlapping rules: outer used %v, want [2 2]", u)
	}

	// A retry between the layers is a second attempt at the base: counted in every
	// counter of the inner Transport, the minute one included.
	inner3 := newTransport(t, nil, ratemonitor.WithRules(minute, hour), ratemonitor.WithStore(st))
	outer3 := newTransport(t, retryTwice{inner3}, ratemonitor.WithRules(minute), ratemonitor.WithStore(st))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: outer3}, up.URL); err != nil {
		t.Fatal(err)
	}
	if u := usedOf(t, inner3, key); !slices.Equal(u, []int{4, 3}) {
		t.Errorf("retry between layers: used %v, want [4 3]", u)
	}
	if hits.Load() != 4 {
		t.Errorf("upstream got %d requests, want 4", hits.Load())
	}
}

// StackedPacedTransports: two paced layers with a limit of 2 per minute let exactly 2
// requests through and refuse the third at once (counted twice, the second would be refused).
func StackedPacedTransports(t *testing.T, newStore func() cache.Store) {
	two := strategy.Rule{Limit: 2, Window: time.Minute}
	hour := strategy.Rule{Limit: 2, Window: time.Hour}
	st := newStore()
	up, hits := upstreamtest.Counting(t, nil)
	key := strings.TrimPrefix(up.URL, "http://")
	inner := newTransport(t, nil, ratemonitor.WithRules(two, hour), ratemonitor.WithStore(st), ratemonitor.WithPacing())
	outer := newTransport(t, inner, ratemonitor.WithRules(two), ratemonitor.WithStore(st), ratemonitor.WithPacing())
	client := &http.Client{Transport: outer}
	for i := range 3 {
		// The third's wait (a minute) is past the deadline: refused at once. The first two go
		// at once too; the deadline is generous so that a loaded machine does not fail them.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
		resp, err := client.Do(req)
		cancel()
		if i < 2 && err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if i < 2 {
			resp.Body.Close()
		}
		if i == 2 && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("request 3: %v, want a deadline error", err)
		}
	}
	if hits.Load() != 2 {
		t.Errorf("upstream got %d, want 2", hits.Load())
	}
	if u := usedOf(t, inner, key); !slices.Equal(u, []int{2, 2}) {
		t.Errorf("used %v, want [2 2]", u)
	}
}

// SameWindowDifferentShapeRefused is issue 13's defect 2: rules of the same limit and
// window whose granularity or margin differ would be counted apart on a shared store; New
// refuses the second Transport, and the middleware's New too, saying why.
func SameWindowDifferentShapeRefused(t *testing.T, newStore func() cache.Store) {
	mk := newStore
	for _, pair := range [][2]strategy.Rule{
		{{Limit: 20, Window: time.Second, Granularity: 10 * time.Millisecond}, {Limit: 20, Window: time.Second, Granularity: 50 * time.Millisecond}},
		{{Limit: 20, Window: time.Second, Margin: 50 * time.Millisecond, Granularity: 50 * time.Millisecond}, {Limit: 20, Window: time.Second, Margin: 100 * time.Millisecond, Granularity: 50 * time.Millisecond}},
		{{Limit: 20, Window: 2 * time.Second}, {Limit: 30, Window: 2 * time.Second, Margin: time.Second}},
	} {
		st := mk()
		newTransport(t, nil, ratemonitor.WithRules(pair[0]), ratemonitor.WithStore(st))
		_, err := ratemonitor.New(nil, ratemonitor.WithRules(pair[1]), ratemonitor.WithStore(st))
		if !errors.Is(err, cache.ErrCounterConflict) || !strings.Contains(err.Error(), pair[0].String()) {
			t.Errorf("%v then %v: %v, want ErrCounterConflict naming the first rule", pair[0], pair[1], err)
		}
		s1, err := rollingwindow.New(pair[1])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := middleware.New(st, s1); !errors.Is(err, cache.ErrCounterConflict) {
			t.Errorf("middleware: %v then %v: %v, want ErrCounterConflict", pair[0], pair[1], err)
		}
		// The same shape, or another window, is fine.
		newTransport(t, nil, ratemonitor.WithRules(pair[0]), ratemonitor.WithStore(st))
		newTransport(t, nil, ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: 3 * time.Second, Margin: 2 * time.Second}), ratemonitor.WithStore(st))
	}
}

// SameWindowSharesOneCount: two Transports with the same window and shape on one store and
// key together admit no more than the limit.
func SameWindowSharesOneCount(t *testing.T, newStore func() cache.Store) {
	st := newStore()
	rule := strategy.Rule{Limit: 5, Window: time.Minute, Headroom: 0}
	strict := strategy.Rule{Limit: 5, Window: time.Minute, Headroom: 2}
	a := newTransport(t, nil, ratemonitor.WithRules(rule), ratemonitor.WithStore(st), ratemonitor.WithPacing())
	b := newTransport(t, nil, ratemonitor.WithRules(strict), ratemonitor.WithStore(st), ratemonitor.WithPacing())
	granted := 0
	for _, tr := range []*ratemonitor.Transport{a, b, a, b, a, b, a, b} {
		// A refused reserve's wait (up to a minute) is past the deadline: refused at once. The
		// deadline is generous so that a loaded machine does not fail a grant.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := tr.Reserve(ctx, "k", 1)
		cancel()
		if err == nil {
			granted++
			_ = r
		}
	}
	if granted != 5 {
		t.Errorf("granted %d, want 5 (the looser limit, on one shared count)", granted)
	}
}

// AppRulesDoNotConflictWithKeyRules: the app key's rules live on one key of their own, so a
// different margin there splits no count (the README's Xero configuration, on a given store);
// two Transports' app rules on the same app key are still checked.
func AppRulesDoNotConflictWithKeyRules(t *testing.T, newStore func() cache.Store) {
	st := newStore()
	tenant := strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}
	app := strategy.Rule{Limit: 10_000, Window: time.Minute}
	for range 2 {
		newTransport(t, nil, ratemonitor.WithRules(tenant), ratemonitor.WithAppRules("xero-app", app), ratemonitor.WithStore(st))
	}
	_, err := ratemonitor.New(nil, ratemonitor.WithRules(tenant), ratemonitor.WithAppRules("xero-app", strategy.Rule{Limit: 10_000, Window: time.Minute, Margin: 2 * time.Second}), ratemonitor.WithStore(st))
	if !errors.Is(err, cache.ErrCounterConflict) || !strings.HasPrefix(err.Error(), "ratemonitor: WithAppRules: ") {
		t.Errorf("app rules with another margin on the same app key: %v, want an app-rules ErrCounterConflict", err)
	}
	// A failed New claims nothing: the other app key's margin is free to differ.
	newTransport(t, nil, ratemonitor.WithRules(tenant), ratemonitor.WithAppRules("other-app", strategy.Rule{Limit: 100, Window: time.Minute, Margin: 2 * time.Second}), ratemonitor.WithStore(st))
}

// keepLast is a base that answers 200 and keeps the last request it was given.
type keepLast struct{ got atomic.Pointer[http.Request] }

func (k *keepLast) RoundTrip(req *http.Request) (*http.Response, error) {
	k.got.Store(req)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// AloneOnItsStoreSendsTheRequestItself: a paced Transport alone on a store value with a
// cache.Sharing (each store of this repository has one) passes the request itself to its base,
// without the mark's two allocations; once another Transport uses that store value, it passes
// a marked copy, for a Transport further in.
func AloneOnItsStoreSendsTheRequestItself(t *testing.T, newStore func() cache.Store) {
	st := newStore()
	if d, ok := st.(cache.Describer); !ok || d.Describe().Sharing == nil {
		t.Fatalf("%T has no cache.Sharing (cache.Describer)", st)
	}
	base := &keepLast{}
	tr := newTransport(t, base, ratemonitor.WithRules(minute), ratemonitor.WithStore(st), ratemonitor.WithPacing())
	req, _ := http.NewRequest(http.MethodGet, "http://api.example/", nil)
	send := func() {
		t.Helper()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send()
	if base.got.Load() != req {
		t.Errorf("%T: alone on its store, the Transport passed a copy of the request, want the request itself", st)
	}
	newTransport(t, nil, ratemonitor.WithRules(minute), ratemonitor.WithStore(st))
	send()
	if base.got.Load() == req {
		t.Errorf("%T: another Transport over the store value, and the request was passed unmarked", st)
	}
}

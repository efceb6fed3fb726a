package ratemonitor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

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

// TestStackedFailoverCountsEveryAttempt: an outer Transport (60/1m) over a failover between two
// inner Transports (60/1m and 5000/24h) on one store and key. The primary's base fails, the
// fallback's succeeds: two attempts reached a base, so the shared minute counter must say 2.
// Before the fix a mark was used once per inner Transport, so both inner Transports skipped
// the minute counter the outer one had counted once: used [1 2].
func TestStackedFailoverCountsEveryAttempt(t *testing.T) {
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
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
			primary := newTransport(t, down, WithRules(minute, day10), WithStore(st), WithKeyFunc(key))
			fallback := newTransport(t, ok, WithRules(minute, day10), WithStore(st), WithKeyFunc(key))
			outer := newTransport(t, failover{primary, fallback}, WithRules(minute), WithStore(st), WithKeyFunc(key))
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
		})
	}
}

// TestStackedThreeLayersRetry: A (minute) → retry twice → B (hour) → C (minute, hour), one store
// and key. Two attempts reach C's base. The first is counted by A in the minute counter and by B
// in the hour one, which C must skip, both; the second, a new attempt below A, is counted by B
// (hour) and by C in the minute counter only. used [2 2].
func TestStackedThreeLayersRetry(t *testing.T) {
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			ok := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
			})
			hour := strategy.Rule{Limit: 1000, Window: time.Hour}
			key := func(*http.Request) string { return "k" }
			c := newTransport(t, ok, WithRules(minute, hour), WithStore(st), WithKeyFunc(key))
			b := newTransport(t, c, WithRules(hour), WithStore(st), WithKeyFunc(key))
			a := newTransport(t, retryTwice{b}, WithRules(minute), WithStore(st), WithKeyFunc(key))
			req, _ := http.NewRequest(http.MethodGet, "http://upstream.invalid/", nil)
			resp, err := a.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if u := usedOf(t, c, "k"); !slices.Equal(u, []int{2, 2}) {
				t.Errorf("used %v after 2 attempts, want [2 2]", u)
			}
		})
	}
}

// TestStackedInnerReservation: a Reservation of the inner Transport carried through an outer
// one. The attempt spends the reservation's slot, recorded in both of the inner's counters by
// Reserve; the outer Transport records it again in the shared minute counter, so the inner one
// gives the reservation's slot back there: one attempt, used [1 1]. Before the fix, used
// [2 1]. When the outer Transport counts every counter of the inner one, the slot is spent
// and given back all the same: used [1], nothing left reserved (before: [2], the slot still
// held).
func TestStackedInnerReservation(t *testing.T) {
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			ok := upstreamtest.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
			})
			send := func(outer *Transport, r *Reservation) {
				t.Helper()
				req, _ := http.NewRequestWithContext(r.Context(context.Background()), http.MethodGet, "http://upstream.invalid/", nil)
				resp, err := outer.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			inner := newTransport(t, ok, WithRules(minute, day10), WithStore(st), WithKeyFunc(func(*http.Request) string { return "k" }))
			outer := newTransport(t, inner, WithRules(minute), WithStore(st), WithKeyFunc(func(*http.Request) string { return "k" }))
			r, err := inner.Reserve(context.Background(), "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			send(outer, r)
			if u := usedOf(t, inner, "k"); !slices.Equal(u, []int{1, 1}) || r.Remaining() != 0 {
				t.Errorf("overlapping: used %v after 1 attempt on a reservation of 1, want [1 1] (remaining %d, want 0)", u, r.Remaining())
			}

			inner2 := newTransport(t, ok, WithRules(minute), WithStore(st), WithKeyFunc(func(*http.Request) string { return "k2" }))
			outer2 := newTransport(t, inner2, WithRules(minute), WithStore(st), WithKeyFunc(func(*http.Request) string { return "k2" }))
			r2, err := inner2.Reserve(context.Background(), "k2", 1)
			if err != nil {
				t.Fatal(err)
			}
			send(outer2, r2)
			if u := usedOf(t, inner2, "k2"); !slices.Equal(u, []int{1}) || r2.Remaining() != 0 {
				t.Errorf("all counted outside: used %v after 1 attempt on a reservation of 1, want [1] (remaining %d, want 0)", u, r2.Remaining())
			}
		})
	}
}

// Package upstreamtest holds the upstreams the Transport tests send to (httptest servers, and
// base RoundTrippers that answer without a network) and the small helpers that send to them:
// one copy for the core's tests and for the stores' modules' Transport tests (which reach it
// through the core's path prefix), so that a test moved to a store's module runs against the
// same upstream as the core's.
//
// It imports no package of the core that imports the root package, so that the root's own
// (internal) tests can use it; what needs a *ratemonitor.Transport takes an interface.
package upstreamtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Counting is an httptest server that counts the requests it receives and hands each to h
// (none: 200, empty). It is closed when the test ends.
func Counting(t testing.TB, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// Get sends a GET with the given header lines (name, value, ...) through c, and reads and
// closes the body.
func Get(t testing.TB, c *http.Client, url string, header ...string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// SendWithin sends a GET through tr within timeout, and reads and closes the body.
func SendWithin(tr http.RoundTripper, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// RoundTripFunc is a base RoundTripper made of a function.
type RoundTripFunc func(*http.Request) (*http.Response, error)

func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// OK answers every request 200 with an empty body, without a network.
var OK = RoundTripFunc(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
})

// Answer is an upstream handler whose next responses are set by the test: status and header
// lines. Its zero value answers 200 with no header.
type Answer struct {
	status atomic.Int64
	header atomic.Pointer[[]string]
}

// Set makes the next responses status, with the header lines kv (name, value, ...).
func (a *Answer) Set(status int, kv ...string) {
	a.status.Store(int64(status))
	a.header.Store(&kv)
}

// Serve answers as Set said.
func (a *Answer) Serve(w http.ResponseWriter, _ *http.Request) {
	if kv := a.header.Load(); kv != nil {
		for i := 0; i+1 < len(*kv); i += 2 {
			w.Header().Add((*kv)[i], (*kv)[i+1])
		}
	}
	if s := a.status.Load(); s != 0 {
		w.WriteHeader(int(s))
	}
}

// InFlight answers every request at once with a body of "ok" (none to HEAD), and tracks how
// many of its responses' bodies the client has not finished (now) and the most at once
// (most): the requests in flight as the upstream sees them. It is closed when the test ends.
func InFlight(t testing.TB) (srv *httptest.Server, now, most *atomic.Int64) {
	now, most = new(atomic.Int64), new(atomic.Int64)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		if r.Method != http.MethodHead {
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	return srv, now, most
}

// Leasing is what ConcurrentRun needs of a Transport: it sends, and tells its slots in flight.
type Leasing interface {
	http.RoundTripper
	InFlight(key string) int
}

// ConcurrentRun sends workers × each GETs to url through trs (round robin), reading every
// body and wanting 200, and checks that no slot is left in flight after, under url's host.
func ConcurrentRun[T Leasing](t testing.TB, trs []T, url string, workers, each int) {
	var wg sync.WaitGroup
	for w := range workers {
		c := &http.Client{Transport: trs[w%len(trs)]}
		wg.Go(func() {
			for range each {
				r, err := c.Get(url)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != http.StatusOK {
					t.Errorf("status %d", r.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	for _, tr := range trs {
		if n := tr.InFlight(strings.TrimPrefix(url, "http://")); n != 0 {
			t.Errorf("after the run: InFlight %d, want 0", n)
		}
	}
}

// HeaderCost reads the cost an upstream reports from X-Real-Cost (Cost's header).
var HeaderCost = cost.ReaderFunc(func(resp *http.Response, _ time.Time) cost.Report {
	n, err := strconv.Atoi(resp.Header.Get("X-Real-Cost"))
	if err != nil {
		return cost.Report{Cost: cost.Unknown}
	}
	return cost.Report{Cost: n}
})

// Cost counts the requests it receives in hits and reports each one's cost real in
// X-Real-Cost, with a body of {}. It is closed when the test ends.
func Cost(t testing.TB, real string, hits *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-Real-Cost", real)
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Strict is an upstream handler that enforces Rules from its own log of arrival instants, read
// from Clock, and answers 429 (and counts a violation) for any request that would break one.
type Strict struct {
	Clock clock.Clock
	Rules []strategy.Rule

	mu         sync.Mutex
	arrivals   []time.Time
	order      []string
	violations int
}

func (u *Strict) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := u.Clock.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, rule := range u.Rules {
		n := 0
		for _, s := range u.arrivals {
			if !s.After(now) && now.Before(s.Add(rule.Window)) {
				n++
			}
		}
		if n >= rule.Limit {
			u.violations++
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
	}
	u.arrivals = append(u.arrivals, now)
	u.order = append(u.order, r.Header.Get("X-Order"))
}

// Seen returns, so far, the instants of the requests u accepted, their X-Order headers in the
// same order, and how many requests it refused.
func (u *Strict) Seen() (arrivals []time.Time, order []string, violations int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Time(nil), u.arrivals...), append([]string(nil), u.order...), u.violations
}

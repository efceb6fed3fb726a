package transporttest

// Small test-local helpers, copies of the core package's own test helpers (which cannot be
// imported from here), kept to what these tests use.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	t0     = time.Unix(1_800_000_000, 0)
	minute = strategy.Rule{Limit: 60, Window: time.Minute}
	day    = strategy.Rule{Limit: 5000, Window: 24 * time.Hour}
	// day10 is Xero's day rule in 10 s buckets, which the Redis store accepts.
	day10 = strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}
)

var discard = slog.New(slog.DiscardHandler)

// newStore returns a Redis store on srv, closed when the test ends. Stores made with the same
// options on one server share their state, as two processes' stores would. Without a Timeout
// it waits up to 5 s for an answer (not the default 100 ms), so that a slow answer on a busy
// machine (-race, other packages' tests) is not taken for a store failure, which would switch
// the Transport to its error policy; the tests of that timeout make their store themselves.
func newStore(t *testing.T, srv *redistest.Server, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	st, err := redisstore.New(srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// leaseStore returns a Redis store with a prefix of the test's own.
func leaseStore(t *testing.T, srv *redistest.Server) *redisstore.Store {
	t.Helper()
	return newStore(t, srv, redisstore.Options{Prefix: "inflight-" + strings.ReplaceAll(t.Name(), "/", "-")})
}

func newTransport(t *testing.T, base http.RoundTripper, opts ...ratemonitor.Option) *ratemonitor.Transport {
	t.Helper()
	tr, err := ratemonitor.New(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// upstream is an httptest server that counts the requests it receives.
func upstream(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
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

// get sends a GET with the given header lines (name, value, ...) and reads the body.
func get(t *testing.T, c *http.Client, url string, header ...string) (*http.Response, error) {
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

// usedOf is the key's usage of each rule (AllocationUsed).
func usedOf(t *testing.T, tr *ratemonitor.Transport, key string) []int {
	t.Helper()
	u, err := tr.AllocationUsed(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, x := range u {
		out = append(out, x.Used)
	}
	return out
}

// used is the key's usage of its first rule.
func used(t *testing.T, tr *ratemonitor.Transport, key string) int {
	t.Helper()
	return usedOf(t, tr, key)[0]
}

func status(t *testing.T, tr *ratemonitor.Transport, key string) ratemonitor.Status {
	t.Helper()
	s, err := tr.Status(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// answer is an upstream whose next response is set by the test: status and header lines.
type answer struct {
	status atomic.Int64
	header atomic.Pointer[[]string]
}

func (a *answer) set(status int, kv ...string) {
	a.status.Store(int64(status))
	a.header.Store(&kv)
}

func (a *answer) serve(w http.ResponseWriter, _ *http.Request) {
	if kv := a.header.Load(); kv != nil {
		for i := 0; i+1 < len(*kv); i += 2 {
			w.Header().Add((*kv)[i], (*kv)[i+1])
		}
	}
	if s := a.status.Load(); s != 0 {
		w.WriteHeader(int(s))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// okBase answers every request 200 with an empty body, without a network.
var okBase = roundTripFunc(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
})

// countingUpstream answers every request at once with a body of "ok", and tracks how many of
// its responses' bodies the client has not finished (now) and the most at once (most): the
// requests in flight as the upstream sees them.
func countingUpstream(t *testing.T) (srv *httptest.Server, now, most *atomic.Int64) {
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

// do sends a GET through tr with ctx and returns the response (body open) or error.
func do(tr *ratemonitor.Transport, ctx context.Context, url string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	return (&http.Client{Transport: tr}).Do(req)
}

// sendWithin sends a GET through tr within timeout and reads the body.
func sendWithin(tr http.RoundTripper, url string, timeout time.Duration) error {
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

// concurrentRun sends workers × each GETs through trs (round robin), reading every body, and
// checks that no slot is left in flight after.
func concurrentRun(t *testing.T, trs []*ratemonitor.Transport, url string, workers, each int) {
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

// headerCost reads the cost an upstream reports from X-Real-Cost.
var headerCost = cost.ReaderFunc(func(resp *http.Response, _ time.Time) cost.Report {
	n, err := strconv.Atoi(resp.Header.Get("X-Real-Cost"))
	if err != nil {
		return cost.Report{Cost: cost.Unknown}
	}
	return cost.Report{Cost: n}
})

// costUpstream counts the requests it receives and reports each cost real.
func costUpstream(t *testing.T, real string, hits *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-Real-Cost", real)
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// events keeps the observer's events, dropping those that do not fit.
type events struct{ ch chan observe.Event }

func (o events) Observe(e observe.Event) {
	select {
	case o.ch <- e:
	default:
	}
}

package transporttest

// Small test-local helpers over the Redis store and the public API; the upstreams and the
// senders shared with the core's tests are in internal/upstreamtest.

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
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

// do sends a GET through tr with ctx and returns the response (body open) or error.
func do(tr *ratemonitor.Transport, ctx context.Context, url string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	return (&http.Client{Transport: tr}).Do(req)
}

// events keeps the observer's events, dropping those that do not fit.
type events struct{ ch chan observe.Event }

func (o events) Observe(e observe.Event) {
	select {
	case o.ch <- e:
	default:
	}
}

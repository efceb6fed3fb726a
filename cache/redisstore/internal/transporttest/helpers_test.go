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
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/transportcheck"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	t0     = time.Unix(1_800_000_000, 0)
	minute = strategy.Rule{Limit: 60, Window: time.Minute}
	// day is a day in exact 1 s buckets, asked for (the default for a day is 24 min): up to
	// 86 401 buckets a key, which the Redis store refuses.
	day = strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Second}
	// day10 is Xero's day rule in 10 s buckets, which the Redis store accepts.
	day10 = strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}
)

var discard = slog.New(slog.DiscardHandler)

// The Transport helpers of internal/transportcheck, under the names these tests use.
var (
	usedOf = transportcheck.UsedOf
	used   = transportcheck.Used
	status = transportcheck.StatusOf[ratemonitor.Status, *ratemonitor.Transport]
)

func newTransport(t *testing.T, base http.RoundTripper, opts ...ratemonitor.Option) *ratemonitor.Transport {
	t.Helper()
	return transportcheck.New(t, ratemonitor.New, base, opts...)
}

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

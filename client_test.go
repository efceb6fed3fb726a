package ratemonitor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/transportcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"go.uber.org/goleak"
)

// The Transport's first promise: every attempt that reaches the base RoundTripper is counted
// once per rule, under the request's key, and the request and its answer pass through
// untouched. This file also holds the helpers the package's tests share (t0, minute, day,
// newTransport, usedOf, status, recorder).

// TestMain fails the package if a test leaves a goroutine behind (a sleeper, a renewer, a
// server).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The Transport helpers of internal/transportcheck, under the names these tests use.
var (
	usedOf = transportcheck.UsedOf
	status = transportcheck.StatusOf[Status, *Transport]
)

// newTransport is New(base, opts...), failing t on an error and closed when the test ends.
func newTransport(t *testing.T, base http.RoundTripper, opts ...Option) *Transport {
	t.Helper()
	return transportcheck.New(t, New, base, opts...)
}

// The instant the manual clocks start at, and Xero's rules per tenant.
var (
	t0     = time.Unix(1_800_000_000, 0)
	minute = strategy.Rule{Limit: 60, Window: time.Minute}
	day    = strategy.Rule{Limit: 5000, Window: 24 * time.Hour}
)

// discard is a logger for tests whose warnings are expected.
var discard = slog.New(slog.DiscardHandler)

// mustFixed is the fixed-window strategy of r.
func mustFixed(r strategy.Rule) *engine.Strategy {
	s, err := fixedwindow.New(r)
	if err != nil {
		panic(err)
	}
	return s
}

// recorder is a base RoundTripper that returns a fixed answer and keeps what it was given.
type recorder struct {
	got  *http.Request
	resp *http.Response
	err  error
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return r.resp, r.err
}

// bodySpy records whether the transport closed the request body.
type bodySpy struct {
	io.Reader
	closed bool
}

func (b *bodySpy) Close() error { b.closed = true; return nil }

// TestRecordsEveryAttempt: successes, 429s, transport failures and each redirect hop count once
// per rule, under the right key.
func TestRecordsEveryAttempt(t *testing.T) {
	srv, hits := upstreamtest.Counting(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/limited":
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(minute, day), WithClock(clk),
		WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)))
	c := &http.Client{Transport: tr}
	for _, path := range []string{"/ok", "/redirect", "/limited"} {
		if _, err := upstreamtest.Get(t, c, srv.URL+path, "Xero-Tenant-Id", "tenant-a"); err != nil {
			t.Fatal(err)
		}
	}
	// /ok, /redirect, its hop to /ok (http.Client copies the tenant header on a same-host
	// redirect, so the hop stays with the tenant) and /limited.
	host := strings.TrimPrefix(srv.URL, "http://")
	if got := usedOf(t, tr, "tenant-a"); got[0] != 4 || got[1] != 4 {
		t.Errorf("tenant-a used %v, want [4 4]", got)
	}
	if got := usedOf(t, tr, host); got[0] != 0 {
		t.Errorf("host used %v, want 0", got)
	}
	if hits.Load() != 4 {
		t.Fatalf("upstream saw %d attempts, the monitor recorded 4", hits.Load())
	}

	// A request that fails in the base transport was still an attempt.
	srv.Close()
	if _, err := upstreamtest.Get(t, c, srv.URL+"/ok", "Xero-Tenant-Id", "tenant-b"); err == nil {
		t.Fatal("expected a connection error")
	}
	if got := usedOf(t, tr, "tenant-b"); got[0] != 1 {
		t.Errorf("failed attempt not recorded: %v", got)
	}
}

// TestPassesThroughUntouched: the base gets the caller's request (or a shallow copy of it
// carrying what it was counted in), the caller gets the base's response and error as they are,
// and the request is not modified; the key defaults to the URL's host.
func TestPassesThroughUntouched(t *testing.T) {
	wantErr := errors.New("boom")
	wantResp := &http.Response{StatusCode: 418}
	base := &recorder{resp: wantResp, err: wantErr}
	tr := newTransport(t, base, WithRules(minute), WithClock(clock.NewManual(t0)))
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.com/v1/x?q=1", strings.NewReader("body"))
	req.Header.Set("Authorization", "Bearer t")
	before := req.Clone(context.Background())
	resp, err := tr.RoundTrip(req)
	if resp != wantResp || err != wantErr {
		t.Fatalf("got %v, %v; want the base's own values", resp, err)
	}
	// The base gets the caller's request, or a shallow copy whose context says what it was
	// counted in (for a Transport further in): same URL, header and body.
	if base.got != req && (base.got.URL != req.URL || base.got.Body != req.Body ||
		base.got.Method != req.Method || len(base.got.Header) != len(req.Header) || markFrom(base.got.Context()) == nil) {
		t.Error("the base did not receive the caller's request, nor a shallow copy of it")
	}
	if req.URL.String() != before.URL.String() || req.Method != before.Method ||
		len(req.Header) != len(before.Header) || req.Header.Get("Authorization") != "Bearer t" {
		t.Errorf("request was modified: %v %v %v", req.Method, req.URL, req.Header)
	}
	if got := usedOf(t, tr, "api.example.com"); got[0] != 1 {
		t.Errorf("keyed by host: used %v", got)
	}
}

// TestZeroTransportSendsButIsNotConfigured: a zero Transport sends through
// http.DefaultTransport without counting, and its methods say ErrNotConfigured.
func TestZeroTransportSendsButIsNotConfigured(t *testing.T) {
	srv, hits := upstreamtest.Counting(t, nil)
	var tr Transport
	if _, err := upstreamtest.Get(t, &http.Client{Transport: &tr}, srv.URL); err != nil || hits.Load() != 1 {
		t.Fatalf("zero Transport: %v, hits %d", err, hits.Load())
	}
	if _, err := tr.WaitSeconds(context.Background(), "k", 1); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("zero Transport WaitSeconds: %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Error(err)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

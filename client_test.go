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

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/transportcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The Transport helpers of internal/transportcheck, under the names these tests use.
var (
	usedOf = transportcheck.UsedOf
	status = transportcheck.StatusOf[Status, *Transport]
)

func newTransport(t *testing.T, base http.RoundTripper, opts ...Option) *Transport {
	t.Helper()
	return transportcheck.New(t, New, base, opts...)
}

var (
	t0     = time.Unix(1_800_000_000, 0)
	minute = strategy.Rule{Limit: 60, Window: time.Minute}
	day    = strategy.Rule{Limit: 5000, Window: 24 * time.Hour}
)

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

func TestKeys(t *testing.T) {
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute), WithClock(clock.NewManual(t0)),
		WithKeyFunc(KeyByHeader("xero-tenant-id", func(*http.Request) string { return "no-tenant" })))
	send := func(ctx context.Context, tenant string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.xero.com/x", nil)
		if tenant != "" {
			req.Header.Set("Xero-Tenant-Id", tenant)
		}
		tr.RoundTrip(req)
	}
	send(context.Background(), "t1")
	send(context.Background(), "t1")
	send(context.Background(), "")
	send(WithKey(context.Background(), "per-request"), "t1")
	send(WithKey(context.Background(), ""), "t1")
	for key, want := range map[string]int{"t1": 2, "no-tenant": 1, "per-request": 1, "": 1, "api.xero.com": 0} {
		if got := usedOf(t, tr, key)[0]; got != want {
			t.Errorf("key %q: used %d, want %d", key, got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "/relative", nil)
	req.Host = "h.example"
	if got := KeyByHost(req); got != "h.example" {
		t.Errorf("KeyByHost without URL host = %q", got)
	}
}

func TestWaitTimeAndSeconds(t *testing.T) {
	clk := clock.NewManual(t0)
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute, day), WithClock(clk))
	ctx := context.Background()
	for range 60 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	clk.Advance(30*time.Second + 500*time.Millisecond)
	d, err := tr.WaitTime(ctx, "a.example", 1)
	if err != nil || d != 29500*time.Millisecond {
		t.Errorf("WaitTime = %v, %v; want 29.5s", d, err)
	}
	s, err := tr.WaitSeconds(ctx, "a.example", 1)
	if err != nil || s != 30 {
		t.Errorf("WaitSeconds = %d, %v; want 30 (rounded up)", s, err)
	}
	clk.Advance(29500 * time.Millisecond)
	if s, _ := tr.WaitSeconds(ctx, "a.example", 60); s != 0 {
		t.Errorf("WaitSeconds at s+W = %d, want 0", s)
	}
	u, _ := tr.AllocationUsed(ctx, "a.example")
	if u[0].Used != 0 || u[1].Used != 60 || u[1].Remaining != 4940 {
		t.Errorf("usage at s+W: %+v", u)
	}
	if _, err := tr.WaitSeconds(ctx, "a.example", 0); !errors.Is(err, strategy.ErrInvalidBurst) {
		t.Errorf("burst 0: %v", err)
	}
	if _, err := tr.WaitTime(ctx, "a.example", 61); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 61: %v", err)
	}
}

func TestWait(t *testing.T) {
	clk := &clock.Manual{Auto: true}
	clk.Set(t0)
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(strategy.Rule{Limit: 2, Window: 10 * time.Second}), WithClock(clk))
	ctx := context.Background()
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	if err := tr.Wait(ctx, "a.example", 1); err != nil {
		t.Fatal(err)
	}
	if got := clk.Now().Sub(t0); got != 10*time.Second {
		t.Errorf("Wait slept %v on the clock, want exactly 10s", got)
	}
	if err := tr.Wait(ctx, "a.example", 3); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 3: %v", err)
	}
}

func TestWaitDeadlineAndCancel(t *testing.T) {
	clk := clock.NewManual(t0) // moves only by hand: a Wait that sleeps blocks
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute), WithClock(clk))
	for range 60 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := tr.Wait(ctx, "a.example", 1)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("Wait with a 1s deadline for a 60s wait: %v after %v; want DeadlineExceeded at once", err, time.Since(start))
	}
	if !strings.Contains(err.Error(), "need a wait of 1m0s") {
		t.Errorf("message does not say the wait: %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- tr.Wait(ctx, "a.example", 1) }()
	for clk.Sleepers() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled Wait did not return")
	}
	if clk.Sleepers() != 0 {
		t.Error("a cancelled Wait left its sleeper behind")
	}
}

// bodySpy records whether the transport closed the request body.
type bodySpy struct {
	io.Reader
	closed bool
}

func (b *bodySpy) Close() error { b.closed = true; return nil }

// TestStoreFailure uses a real store that fails (closed) under both policies.
func TestStoreFailure(t *testing.T) {
	broken, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	srv, hits := upstreamtest.Counting(t, nil)

	var reported []error
	open := newTransport(t, nil, WithRules(minute), WithStore(broken), WithLogger(discard),
		WithErrorHandler(func(_ *http.Request, key string, err error) { reported = append(reported, err) }))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: open}, srv.URL); err != nil {
		t.Fatalf("fail open returned %v", err)
	}
	if hits.Load() != 1 || len(reported) != 1 || !errors.Is(reported[0], cache.ErrClosed) {
		t.Errorf("fail open: upstream hits %d, reported %v", hits.Load(), reported)
	}

	closed := newTransport(t, nil, WithRules(minute), WithStore(broken), WithStoreErrorPolicy(SendNothing), WithLogger(discard))
	body := &bodySpy{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
	resp, err := closed.RoundTrip(req)
	var se *StoreError
	if resp != nil || !errors.As(err, &se) || !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("fail closed: %v, %v", resp, err)
	}
	if hits.Load() != 1 {
		t.Error("fail closed sent the request")
	}
	if !body.closed {
		t.Error("fail closed did not close the request body")
	}
	if !strings.Contains(err.Error(), "not sent") {
		t.Errorf("message: %v", err)
	}
	if _, err := closed.AllocationUsed(context.Background(), "k"); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("AllocationUsed on a broken store: %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	cases := map[string][]Option{
		"no rules":             nil,
		"invalid rule":         {WithRules(strategy.Rule{Limit: 0, Window: time.Minute})},
		"nil store":            {WithRules(minute), WithStore(nil)},
		"nil key func":         {WithRules(minute), WithKeyFunc(nil)},
		"nil clock":            {WithRules(minute), WithClock(nil)},
		"bad policy":           {WithRules(minute), WithStoreErrorPolicy(7)},
		"rules twice":          {WithRules(minute), WithRules(minute)},
		"rules and a strategy": {WithRules(minute), WithStrategy(mustFixed(minute))},
	}
	for name, opts := range cases {
		if tr, err := New(nil, opts...); err == nil {
			tr.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestZeroTransport(t *testing.T) {
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

var discard = slog.New(slog.DiscardHandler)

func TestBadOptions(t *testing.T) {
	if _, err := New(nil, WithRules(minute), nil); err == nil || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("nil option: %v", err)
	}
	var m *cache.Memory
	if _, err := New(nil, WithRules(minute), WithStore(m)); err == nil {
		t.Error("typed nil store accepted")
	}
	store, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := New(nil, WithRules(minute), WithStore(store), WithClock(clock.NewManual(t0))); err == nil {
		t.Error("a manual Transport clock over a real-clock store was accepted")
	}
	// A store's clock is the Transport's clock.
	clk := clock.NewManual(t0)
	shared, _ := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	defer shared.Close()
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute), WithStore(shared))
	for range 60 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	clk.Advance(15 * time.Second)
	if d, _ := tr.WaitTime(context.Background(), "a.example", 1); d != 45*time.Second {
		t.Errorf("wait on the store's clock = %v, want 45s", d)
	}
}

func TestWaitCancelledContext(t *testing.T) {
	tr := newTransport(t, nil, WithRules(minute))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.Wait(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context and room: %v", err)
	}
}

func mustFixed(r strategy.Rule) *engine.Strategy {
	s, err := fixedwindow.New(r)
	if err != nil {
		panic(err)
	}
	return s
}

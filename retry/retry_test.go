package retry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTransport(t *testing.T, opts ...ratemonitor.Option) *ratemonitor.Transport {
	t.Helper()
	tr, err := ratemonitor.New(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func fetch(t *testing.T, c *retryablehttp.Client, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestOneAttemptPerSecond is the case: a limit of 1 per second, the first attempt gets
// a 500 and is retried, and a second request starts at the same moment. The upstream must see
// at most one attempt in any second. The rule holds a 100 ms margin for the time between the
// Transport's reservation and the upstream's arrival.
func TestOneAttemptPerSecond(t *testing.T) {
	var (
		mu       sync.Mutex
		arrivals []time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		first := len(arrivals) == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	tr := newTransport(t, ratemonitor.WithPacing(), ratemonitor.WithRules(strategy.Rule{
		Limit: 1, Window: time.Second, Granularity: 10 * time.Millisecond, Margin: 100 * time.Millisecond}))
	c := NewClient(tr)
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 10*time.Millisecond
	var wg sync.WaitGroup
	errs := make([]error, 2)
	codes := make([]int, 2)
	for i := range 2 {
		wg.Go(func() {
			resp, err := fetch(t, c, context.Background(), srv.URL)
			errs[i] = err
			if err == nil {
				codes[i] = resp.StatusCode
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || codes[0] != 200 || codes[1] != 200 {
		t.Fatalf("requests: %v, statuses %v", err, codes)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 3 {
		t.Fatalf("upstream saw %d attempts, want 3 (one retry)", len(arrivals))
	}
	for i := 1; i < len(arrivals); i++ {
		if gap := arrivals[i].Sub(arrivals[i-1]); gap < time.Second {
			t.Fatalf("attempts %d and %d arrived %v apart, want ≥ 1s", i, i+1, gap)
		}
	}
}

// TestBackoffValues checks the wait on a manual clock: the longest of the base backoff,
// Retry-After and the monitor's wait, and never past the context's deadline.
func TestBackoffValues(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := rollingwindow.New(strategy.Rule{Limit: 60, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, ratemonitor.WithStore(st), ratemonitor.WithStrategy(s), ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)))
	ctx := context.Background()
	if err := st.Record(ctx, s, "full", 60); err != nil {
		t.Fatal(err)
	}
	clk.Advance(15 * time.Second)
	resp := func(ctx context.Context, status int, key string, kv ...string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://upstream.test/", nil)
		req.Header.Set("Xero-Tenant-Id", key)
		r := &http.Response{StatusCode: status, Header: http.Header{}, Request: req}
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
		return r
	}
	constant := func(d time.Duration) retryablehttp.Backoff {
		return func(time.Duration, time.Duration, int, *http.Response) time.Duration { return d }
	}
	cases := []struct {
		name string
		base time.Duration
		resp *http.Response
		want time.Duration
	}{
		{"no response: base", 3 * time.Second, nil, 3 * time.Second},
		{"free key: base", 3 * time.Second, resp(ctx, 500, "free"), 3 * time.Second},
		{"full key: monitor", 3 * time.Second, resp(ctx, 500, "full"), 45 * time.Second},
		{"Retry-After longer than the monitor", time.Second, resp(ctx, 429, "full", "Retry-After", "90"), 90 * time.Second},
		{"Retry-After on a free key", 0, resp(ctx, 503, "free", "Retry-After", "7"), 7 * time.Second},
		{"unreadable Retry-After", 0, resp(ctx, 429, "free", "Retry-After", "later"), 0},
		{"base longest", 100 * time.Second, resp(ctx, 429, "full", "Retry-After", "90"), 100 * time.Second},
	}
	for _, c := range cases {
		if got := Backoff(tr, constant(c.base))(time.Second, 30*time.Second, 1, c.resp); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if got := Backoff(tr, constant(0))(0, 0, 1, resp(dctx, 429, "full", "Retry-After", "90")); got > 5*time.Second || got < 4*time.Second {
		t.Errorf("wait with a 5 s deadline: %v", got)
	}

	check := CheckRetry(tr, retryablehttp.DefaultRetryPolicy)
	if retry, err := check(dctx, resp(dctx, 429, "free", "Retry-After", "30"), nil); retry || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Retry-After past the deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(dctx, resp(dctx, 500, "full"), nil); retry || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("monitor wait past the deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(dctx, resp(dctx, 429, "free", "Retry-After", "2"), nil); !retry || err != nil {
		t.Errorf("Retry-After within the deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(ctx, resp(ctx, 429, "full", "Retry-After", "3000"), nil); !retry || err != nil {
		t.Errorf("no deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(dctx, resp(dctx, 404, "full"), nil); retry || err != nil {
		t.Errorf("not retryable: retry %v, %v", retry, err)
	}
}

// TestEveryAttemptIsCounted: retries and redirect hops all pass through the Transport.
func TestEveryAttemptIsCounted(t *testing.T) {
	var hits, failures atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/a", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/b", http.StatusFound)
	})
	mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if failures.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}))
	c := NewClient(tr)
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 5*time.Millisecond
	resp, err := fetch(t, c, context.Background(), srv.URL+"/a")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	u, err := tr.AllocationUsed(context.Background(), srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 6 || u[0].Used != 6 {
		t.Fatalf("upstream saw %d attempts, the monitor counted %d; want 6 and 6 (3 tries × 2 hops)", hits.Load(), u[0].Used)
	}
}

// TestRetryAfterHonoured: a 429 with Retry-After: 1 is retried no sooner than a second later,
// and with WithSync the pause holds a second request on the same key too.
func TestRetryAfterHonoured(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		first := len(arrivals) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr := newTransport(t, ratemonitor.WithPacing(), ratemonitor.WithSync(ratemonitor.SyncConfig{}),
		ratemonitor.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}))
	c := NewClient(tr)
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 5*time.Millisecond
	if _, err := fetch(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 3 || arrivals[1].Sub(arrivals[0]) < 900*time.Millisecond {
		t.Fatalf("arrivals %v: want 3, the retry at least ~1 s after the 429", arrivals)
	}
}

// TestKnownWaitFailsAtOnce: when the key is already full, a request whose deadline comes
// before its slot fails at once with the Transport's explanation, not after backing off until
// the deadline, and nothing is sent.
func TestKnownWaitFailsAtOnce(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	tr := newTransport(t, ratemonitor.WithPacing(), ratemonitor.WithRules(strategy.Rule{Limit: 1, Window: time.Minute}))
	c := NewClient(tr)
	if _, err := fetch(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := fetch(t, c, ctx, srv.URL)
	var de *ratemonitor.DeadlineError
	if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("after %v: %v; want a *ratemonitor.DeadlineError at once", time.Since(start), err)
	}
	if hits.Load() != 1 {
		t.Fatalf("upstream saw %d requests, want 1", hits.Load())
	}
}

// TestRetryAfterCappedAndDated: Retry-After is capped at the Transport's MaxPause, and an
// HTTP-date is measured from the response's Date, not our clock, while that Date is within
// headers.MaxDateSkew of our clock.
func TestRetryAfterCappedAndDated(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}),
		ratemonitor.WithSync(ratemonitor.SyncConfig{MaxPause: 2 * time.Second}))
	zero := func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 0 }
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
	resp := &http.Response{StatusCode: 429, Header: http.Header{}, Request: req}
	resp.Header.Set("Retry-After", "100000")
	if got := Backoff(tr, zero)(0, 0, 1, resp); got != 2*time.Second {
		t.Errorf("Retry-After 100000 with MaxPause 2s: %v", got)
	}
	ahead := time.Now().Add(time.Minute).UTC()
	resp.Header.Set("Date", ahead.Format(http.TimeFormat))
	resp.Header.Set("Retry-After", ahead.Add(time.Second).Format(http.TimeFormat))
	if got := Backoff(tr, zero)(0, 0, 1, resp); got != time.Second {
		t.Errorf("a date 1 s after the upstream's own Date, its clock a minute ahead: %v", got)
	}
	// An hour ahead is not a skew but a wrong Date: measured from our clock, 1 h 1 s, capped.
	ahead = time.Now().Add(time.Hour).UTC()
	resp.Header.Set("Date", ahead.Format(http.TimeFormat))
	resp.Header.Set("Retry-After", ahead.Add(time.Second).Format(http.TimeFormat))
	if got := Backoff(tr, zero)(0, 0, 1, resp); got != 2*time.Second {
		t.Errorf("a date 1 s after a Date an hour ahead, MaxPause 2s: %v, want 2s", got)
	}
	if got := Exponential(time.Second, 30*time.Second, 2, resp); got != 4*time.Second {
		t.Errorf("Exponential ignores Retry-After: %v, want 4s", got)
	}
}

// TestRetryAfterImplausibleDate: a Retry-After of now + 5 s as an HTTP-date, in a response
// dated 1970, is a wait of 5 s from our clock, not the Transport's MaxPause (24 h); a Date 30 s
// ahead is a plausible skew and the wait is measured from it.
func TestRetryAfterImplausibleDate(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}))
	now := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
	resp := &http.Response{StatusCode: 429, Header: http.Header{}, Request: req}
	resp.Header.Set("Date", "Thu, 01 Jan 1970 00:00:00 GMT")
	resp.Header.Set("Retry-After", now.Add(5*time.Second).Format(http.TimeFormat))
	if got := floor(tr, resp, now); got != 5*time.Second {
		t.Errorf("Retry-After now+5s dated 1970: %v, want 5s", got)
	}
	resp.Header.Set("Date", now.Add(30*time.Second).Format(http.TimeFormat))
	resp.Header.Set("Retry-After", now.Add(35*time.Second).Format(http.TimeFormat))
	if got := floor(tr, resp, now); got != 5*time.Second {
		t.Errorf("Retry-After 5 s after a Date 30 s ahead: %v, want 5s", got)
	}
}

package retry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
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
	"github.com/ratemonitor/ratemonitor/strategy/engine"
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

// grantLog is the memory store keeping the instant of every slot it granted (Reserve's
// Result.At) and taking back the slots released: the instants the rule holds at, before the
// delivery to the upstream adds its own delay.
type grantLog struct {
	*cache.Memory
	mu sync.Mutex
	at []time.Time
}

func (g *grantLog) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := g.Memory.Reserve(ctx, s, key, n)
	if err == nil && res.Allowed {
		g.mu.Lock()
		for range n {
			g.at = append(g.at, res.At)
		}
		g.mu.Unlock()
	}
	return res, err
}

func (g *grantLog) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	err := g.Memory.Release(ctx, s, key, at, n)
	if err == nil {
		g.mu.Lock()
		for range n {
			if i := slices.IndexFunc(g.at, at.Equal); i >= 0 {
				g.at = slices.Delete(g.at, i, i+1)
			}
		}
		g.mu.Unlock()
	}
	return err
}

// grants returns the granted instants in order.
func (g *grantLog) grants() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := slices.Clone(g.at)
	slices.SortFunc(at, time.Time.Compare)
	return at
}

// TestRetriesPacedOneAttemptPerSecond is the case: a limit of 1 per second, the first
// attempt gets a 500 and is retried, and a second request starts at the same moment. Every attempt,
// the retry included, goes through the paced Transport: the store grants the three attempts slots
// at least a second apart (the window, plus the rule's 100 ms margin for the time between the
// Transport's reservation and the upstream's arrival). The gaps the upstream saw are logged: on the
// real clock they differ from the grants' by the delivery delays, which a loaded machine can
// stretch past the margin.
func TestRetriesPacedOneAttemptPerSecond(t *testing.T) {
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
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	store := &grantLog{Memory: mem}
	tr := newTransport(t, ratemonitor.WithPacing(), ratemonitor.WithStore(store), ratemonitor.WithRules(strategy.Rule{
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
	grants := store.grants()
	if len(grants) != 3 {
		t.Fatalf("the store granted %d slots, want 3: one for each attempt", len(grants))
	}
	for i := 1; i < len(grants); i++ {
		t.Logf("attempts %d and %d: granted %v apart, arrived %v apart", i, i+1, grants[i].Sub(grants[i-1]), arrivals[i].Sub(arrivals[i-1]))
		if gap := grants[i].Sub(grants[i-1]); gap < time.Second {
			t.Fatalf("attempts %d and %d granted %v apart, want ≥ 1s", i, i+1, gap)
		}
	}
}

// TestBackoffIsLongestWaitWithinDeadline checks the wait (the monitor's on a manual clock, the
// deadline on the real one): the longest of the base backoff, Retry-After and the monitor's
// wait, and never past the context's deadline.
func TestBackoffIsLongestWaitWithinDeadline(t *testing.T) {
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
		t.Run(c.name, func(t *testing.T) {
			if got := Backoff(tr, constant(c.base))(time.Second, 30*time.Second, 1, c.resp); got != c.want {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		})
	}
	// A deadline 40 s away: before the full key's 45 s and a Retry-After of 60 or 90 s, well
	// after one of 2 s, however long the steps below take on a loaded machine. A wait capped at
	// the deadline is the time left to it, read on the real clock just before and just after.
	dctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	dl, _ := dctx.Deadline()
	most := time.Until(dl)
	got := Backoff(tr, constant(0))(0, 0, 1, resp(dctx, 429, "full", "Retry-After", "90"))
	if least := time.Until(dl); got > most || got < least {
		t.Errorf("wait with a 40 s deadline: %v, want the time left to it, %v to %v", got, least, most)
	}

	check := CheckRetry(tr, retryablehttp.DefaultRetryPolicy)
	if retry, err := check(dctx, resp(dctx, 429, "free", "Retry-After", "60"), nil); retry || !errors.Is(err, context.DeadlineExceeded) {
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

// TestRetryAfterHonoured: a 429 with Retry-After: 1 is retried no sooner than a second later.
// The gap is measured on the real clock, but load cannot shrink it: the retry is made only after
// the 429 has come back, which is after the upstream noted its arrival, and then waits the
// Retry-After from there (a loaded machine makes the gap longer, never shorter).
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

// TestKnownWaitFailsAtOnce: when the key is already full (for an hour), a request whose deadline
// comes before its slot (30 s) fails at once with the Transport's explanation, not after backing
// off until the deadline, and nothing is sent. "At once" is within half the deadline: it takes
// milliseconds, and backing off would take the whole 30 s.
func TestKnownWaitFailsAtOnce(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	tr := newTransport(t, ratemonitor.WithPacing(), ratemonitor.WithRules(strategy.Rule{Limit: 1, Window: time.Hour}))
	c := NewClient(tr)
	if _, err := fetch(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := fetch(t, c, ctx, srv.URL)
	var de *ratemonitor.DeadlineError
	if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 15*time.Second {
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

// TestRetryAfterImplausibleDateFromOurClock: a Retry-After of now + 5 s as an HTTP-date, in a
// response dated 1970, is a wait of 5 s from our clock, not the Transport's MaxPause (24 h); a Date
// 30 s ahead is a plausible skew and the wait is measured from it.
func TestRetryAfterImplausibleDateFromOurClock(t *testing.T) {
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

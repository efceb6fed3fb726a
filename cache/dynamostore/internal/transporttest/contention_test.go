package transporttest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// grantLog is a store that keeps the instant of every slot its inner store granted (Reserve's
// Result.At) and takes back the slots released: the instants a strict model judges.
type grantLog struct {
	cache.Store
	mu sync.Mutex
	at []time.Time
}

func (g *grantLog) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := g.Store.Reserve(ctx, s, key, n)
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
	err := g.Store.Release(ctx, s, key, at, n)
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

// Contends forwards the inner store's answer, so that the Transport sees the store it wraps.
func (g *grantLog) Contends() bool {
	c, ok := g.Store.(cache.Contender)
	return ok && c.Contends()
}

// grants returns the granted instants in order.
func (g *grantLog) grants() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := slices.Clone(g.at)
	slices.SortFunc(at, time.Time.Compare)
	return at
}

// strictPeak returns the most instants of at (sorted) in any window [s, s+w), and how many of
// them start a window holding more than limit: the strict model, every instant kept.
func strictPeak(at []time.Time, w time.Duration, limit int) (peak, violations int) {
	j := 0
	for i := range at {
		for j < len(at) && at[j].Before(at[i].Add(w)) {
			j++
		}
		peak = max(peak, j-i)
		if j-i > limit {
			violations++
		}
	}
	return peak, violations
}

// paceRun sends from callers goroutines, spread over transports paced Transports on store (as
// many processes would), on one key for d,
// each request's context ending at the end of the run, and returns the store's grant instants,
// the upstream's arrival instants (sorted) and the number of store errors reported to the
// error handler.
func paceRun(t *testing.T, store cache.Store, rule strategy.Rule, transports, callers int, d time.Duration) (grants, arrivals []time.Time, storeErrs int64) {
	t.Helper()
	var mu sync.Mutex
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	defer up.Close()
	base := &http.Transport{MaxIdleConnsPerHost: callers}
	defer base.CloseIdleConnections()
	g := &grantLog{Store: store}
	var errs atomic.Int64
	trs := make([]*ratemonitor.Transport, transports)
	for i := range trs {
		// SendUncounted by name (paced Transports default to Degrade, which would absorb a store
		// error this test must see).
		tr, err := ratemonitor.New(base, ratemonitor.WithRules(rule), ratemonitor.WithStore(g), ratemonitor.WithPacing(), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted), ratemonitor.WithLogger(slog.New(slog.DiscardHandler)),
			ratemonitor.WithErrorHandler(func(*http.Request, string, error) { errs.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		trs[i] = tr
	}
	// Warm up first, so that the run measures pacing, not connection set-up: every caller
	// reads another key of the store and gets the upstream once, at the same time.
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if _, err := trs[0].AllocationUsed(context.Background(), "warm-up"); err != nil {
				t.Errorf("warm-up: %v", err)
			}
			req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
			if resp, err := base.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	mu.Lock()
	arrivals = nil
	mu.Unlock()
	end := time.Now().Add(d)
	for i := range callers {
		tr := trs[i%transports]
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithDeadline(context.Background(), end)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
				resp, err := tr.RoundTrip(req)
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("RoundTrip: %v", err)
					}
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	// A request whose context ended at the run's end may still be in the handler: Close waits
	// for it, and the arrivals are read under the handler's lock (a data race otherwise, seen
	// in CI).
	up.Close()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(arrivals, time.Time.Compare)
	return g.grants(), arrivals, errs.Load()
}

// TestPacedContentionDynamo: 64 goroutines pace one key, 20 per second, for 3 s through a
// DynamoDB-backed Transport under the default SendUncounted, as in issue 13 (defect 3), and through
// four Transports sharing the table (as four processes would, whose callers do contend). Every
// request that reaches the upstream was granted by the store (none sent uncounted), the store's
// grants never exceed 20 in any second (the strict model, at the store's own instants), no
// store error is reported (contention is not an outage), and with one Transport at least 75 %
// of the 60 the rule allows in 3 s get through (four Transports, whose writes race, must get at
// least a window's 20: contention slows them, never stalls them). The memory store, run the
// same way, is the reference.
func TestPacedContentionDynamo(t *testing.T) {
	rule := strategy.Rule{Limit: 20, Window: time.Second, Granularity: 10 * time.Millisecond}
	const callers, run = 64, 3 * time.Second
	allowed := rule.Limit * int(run/rule.Window)
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	// One table for both DynamoDB runs: each run's upstream has its own port, so its own key.
	dyn := dynamoStore(t, dynamostore.Options{})
	for _, c := range []struct {
		name       string
		store      cache.Store
		transports int
	}{
		{"memory", mem, 1},
		{"dynamodb", dyn, 1},
		{"dynamodb, 4 Transports", dyn, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			grants, arrivals, storeErrs := paceRun(t, c.store, rule, c.transports, callers, run)
			peak, violations := strictPeak(grants, rule.Window, rule.Limit)
			upPeak, _ := strictPeak(arrivals, rule.Window, rule.Limit)
			arrived := int64(len(arrivals))
			t.Logf("%s: %d granted, %d arrived (peak %d in %v at the upstream), %d store errors; grants: peak %d in %v, %d violations; throughput %.0f %% of %d",
				c.name, len(grants), arrived, upPeak, rule.Window, storeErrs, peak, rule.Window, violations, 100*float64(len(grants))/float64(allowed), allowed)
			// More arrivals than grants would be requests sent uncounted. Fewer is a grant
			// whose request the run's end cancelled on its way (seen once under load).
			if arrived > int64(len(grants)) {
				t.Errorf("%d requests reached the upstream, %d were granted: %d sent uncounted", arrived, len(grants), arrived-int64(len(grants)))
			}
			if violations != 0 || peak > rule.Limit {
				t.Errorf("the store granted up to %d in %v against %d (%d violations)", peak, rule.Window, rule.Limit, violations)
			}
			if storeErrs != 0 {
				t.Errorf("%d store errors reported, want 0: contention is not an outage", storeErrs)
			}
			// Three quarters: dynalite (Node, in memory) answers slower on a loaded 2-core
			// machine (87 % once in CI); a stall, which this guards against, gets far less.
			least := allowed * 3 / 4
			if c.transports > 1 {
				least = rule.Limit
			}
			if len(grants) < least || len(grants) > allowed {
				t.Errorf("%d granted in %v, want %d to %d", len(grants), run, least, allowed)
			}
		})
	}
}

// TestMonitoredContentionDynamo: 64 goroutines × 4 requests on one key in monitoring mode
// (default SendUncounted) through one Transport, and through four sharing the table, over a
// DynamoDB store whose own retries are off, so that racing writers would meet contention at
// once: every one of the 256 requests that reached the upstream is counted (the key counts
// 256), and no store error is reported.
func TestMonitoredContentionDynamo(t *testing.T) {
	st := dynamoStore(t, dynamostore.Options{MaxRetries: -1})
	rule := strategy.Rule{Limit: 1000, Window: time.Hour, Granularity: time.Minute}
	for _, transports := range []int{1, 4} {
		t.Run(strconv.Itoa(transports), func(t *testing.T) {
			var arrived atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { arrived.Add(1) }))
			defer up.Close()
			base := &http.Transport{MaxIdleConnsPerHost: 64}
			defer base.CloseIdleConnections()
			var reported atomic.Int64
			trs := make([]*ratemonitor.Transport, transports)
			for i := range trs {
				trs[i] = newTransport(t, base, ratemonitor.WithRules(rule), ratemonitor.WithStore(st), ratemonitor.WithLogger(slog.New(slog.DiscardHandler)),
					ratemonitor.WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }))
			}
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Go(func() {
					for range 4 {
						req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
						resp, err := trs[i%transports].RoundTrip(req)
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			used := usedOf(t, trs[0], strings.TrimPrefix(up.URL, "http://"))
			if arrived.Load() != 256 || used[0] != 256 || reported.Load() != 0 {
				t.Errorf("%d arrived, the key counts %d, %d store errors reported; want 256, 256, 0", arrived.Load(), used[0], reported.Load())
			}
			t.Logf("store: %+v", st.Stats())
		})
	}
}

// contentionFixture is a DynamoDB store whose first fail conditional writes (UpdateItem) are
// answered "condition failed", as when other writers keep coming first (fail < 0: all of
// them), with the store's own retries off, and an upstream that counts arrivals.
type contentionFixture struct {
	store         *dynamostore.Store
	fail, updates atomic.Int64 // UpdateItem calls to fail, and made (failed or not)
	arrived       atomic.Int64
	url           string
}

func newContentionFixture(t *testing.T, fail int64) *contentionFixture {
	f := &contentionFixture{}
	f.fail.Store(fail)
	f.store = faultyDynamoStore(t, dynamostore.Options{MaxRetries: -1}, func(op string) *http.Response {
		if op != "UpdateItem" {
			return nil
		}
		if n, fail := f.updates.Add(1), f.fail.Load(); fail < 0 || n <= fail {
			return conditionFailed()
		}
		return nil
	})
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { f.arrived.Add(1) }))
	t.Cleanup(up.Close)
	f.url = up.URL
	return f
}

// transport returns a Transport on the fixture's store, SendUncounted unless opts say otherwise
// (by name: paced Transports default to Degrade), whose store errors are counted in reported.
func (f *contentionFixture) transport(t *testing.T, key string, reported *atomic.Int64, opts ...ratemonitor.Option) *ratemonitor.Transport {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	opts = append([]ratemonitor.Option{ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}), ratemonitor.WithStore(f.store),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return key }), ratemonitor.WithLogger(slog.New(slog.DiscardHandler)),
		ratemonitor.WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted)}, opts...)
	return newTransport(t, base, opts...)
}

// TestContentionPastDeadline: when every conditional write on the key loses (the store returns
// dynamostore.ErrContended each time), a request under the default SendUncounted is retried until
// its context's deadline and then not sent: RoundTrip returns an error wrapping both
// context.DeadlineExceeded and cache.ErrContended, the error handler is not called (contention
// is not an outage), the upstream sees nothing and the key counts nothing. So for paced and
// monitored requests, and for Reserve. Before the fix the request was sent uncounted at once.
func TestContentionPastDeadline(t *testing.T) {
	f := newContentionFixture(t, -1)
	const timeout = 100 * time.Millisecond
	for _, mode := range []string{"pacing", "monitoring", "Reserve"} {
		t.Run(mode, func(t *testing.T) {
			var reported atomic.Int64
			var opts []ratemonitor.Option
			if mode == "pacing" {
				opts = append(opts, ratemonitor.WithPacing())
			}
			tr := f.transport(t, "k", &reported, opts...)
			before := f.updates.Load()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			deadline, _ := ctx.Deadline()
			var err error
			if mode == "Reserve" {
				_, err = tr.Reserve(ctx, "k", 1)
			} else {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
				var resp *http.Response
				if resp, err = tr.RoundTrip(req); resp != nil {
					resp.Body.Close()
				}
			}
			early := time.Until(deadline)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cache.ErrContended) || !errors.Is(err, dynamostore.ErrContended) {
				t.Errorf("err = %v, want one wrapping context.DeadlineExceeded and cache.ErrContended", err)
			}
			var se *ratemonitor.StoreError
			if errors.As(err, &se) {
				t.Errorf("err = %v is a *ratemonitor.StoreError: contention is not a store failure", err)
			}
			if n := f.arrived.Load(); n != 0 {
				t.Errorf("the upstream got %d requests, want 0", n)
			}
			if n := reported.Load(); n != 0 {
				t.Errorf("%d store errors reported, want 0", n)
			}
			if early > 0 {
				t.Errorf("gave up %v before the deadline", early)
			}
			if n := f.updates.Load() - before; n < 2 {
				t.Errorf("%d conditional writes tried, want the first and retries", n)
			}
			if used := usedOf(t, tr, "k"); used[0] != 0 {
				t.Errorf("used = %d, want 0", used[0])
			}
		})
	}
}

// TestContentionRetried: when the first 5 conditional writes on the key lose, a request is
// retried by the Transport until the sixth lands, then sent once and counted once, with no store
// error reported; in both modes, and for Reserve (one slot held).
func TestContentionRetried(t *testing.T) {
	f := newContentionFixture(t, 5)
	for _, mode := range []string{"pacing", "monitoring", "Reserve"} {
		t.Run(mode, func(t *testing.T) {
			f.updates.Store(0)
			f.arrived.Store(0)
			var reported atomic.Int64
			var opts []ratemonitor.Option
			if mode == "pacing" {
				opts = append(opts, ratemonitor.WithPacing())
			}
			tr := f.transport(t, mode, &reported, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if mode == "Reserve" {
				var r *ratemonitor.Reservation
				if r, err = tr.Reserve(ctx, mode, 1); err == nil && r.Remaining() != 1 {
					t.Errorf("Remaining = %d, want 1", r.Remaining())
				}
			} else {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
				var resp *http.Response
				if resp, err = tr.RoundTrip(req); resp != nil {
					resp.Body.Close()
				}
			}
			wantSent := int64(1)
			if mode == "Reserve" {
				wantSent = 0
			}
			if err != nil || f.arrived.Load() != wantSent || reported.Load() != 0 || f.updates.Load() != 6 {
				t.Errorf("err %v, %d sent, %d store errors reported, %d conditional writes; want nil, %d, 0, 6",
					err, f.arrived.Load(), reported.Load(), f.updates.Load(), wantSent)
			}
			if used := usedOf(t, tr, mode); used[0] != 1 {
				t.Errorf("used = %d, want 1", used[0])
			}
		})
	}
}

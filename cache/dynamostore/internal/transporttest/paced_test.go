package transporttest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// grantLog is a store that keeps the instant of every slot its inner store granted (Reserve's
// Result.At) and takes back the slots released: the instants a strict model judges.
type grantLog struct {
	cache.Store
	log storetest.GrantLog
}

func (g *grantLog) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := g.Store.Reserve(ctx, s, key, n)
	if err == nil && res.Allowed {
		g.log.Granted(res.At, n)
	}
	return res, err
}

func (g *grantLog) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	err := g.Store.Release(ctx, s, key, at, n)
	if err == nil {
		g.log.Released(at, n)
	}
	return err
}

// Describe forwards the inner store's traits (it contends), so that the Transport sees the
// store it wraps.
func (g *grantLog) Describe() cache.Traits {
	if d, ok := g.Store.(cache.Describer); ok {
		return d.Describe()
	}
	return cache.Traits{}
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

// paceRun sends total requests on one key from callers goroutines, each taking the next request
// while any is left, spread over transports paced Transports on store (as many processes would),
// each request's context ending deadline after it starts, and returns the store's grant instants,
// the upstream's arrival instants (sorted) and the number of store errors reported to the error
// handler. A request that fails fails the test.
func paceRun(t *testing.T, store cache.Store, rule strategy.Rule, transports, callers, total int, deadline time.Duration) (grants, arrivals []time.Time, storeErrs int64) {
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
		defer tr.Close()
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
	var left atomic.Int64
	left.Store(int64(total))
	for i := range callers {
		tr := trs[i%transports]
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					cancel()
					t.Errorf("RoundTrip: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				cancel()
			}
		})
	}
	wg.Wait()
	// Every handler has returned (each request's response was read), but Close waits for the
	// server's goroutines anyway, and the arrivals are read under the handler's lock.
	up.Close()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(arrivals, time.Time.Compare)
	return g.log.Instants(), arrivals, errs.Load()
}

// TestPacedContentionStaysWithinLimitDynamo: 64 goroutines pace 80 requests on one key, 20 per
// second, through a DynamoDB-backed Transport under SendUncounted, as in issue 13 (defect 3), and
// through four Transports sharing the table (as four processes would, whose callers do contend).
// Safety: every request that reaches the upstream was granted by the store (none sent
// uncounted), the store's grants never exceed 20 in any second (the strict model, at the store's
// own instants, which the upstream's arrival instants follow a little late: their peak is only
// logged), and no store error is reported (contention is not an outage). Liveness: every request
// is granted and sent before its context's deadline of a minute (about 3 s idle: the first 20 at
// once, then 20 a second; contention slows the four Transports, never stalls them). The
// throughput is logged, not asserted: on the real clock a loaded machine lowers it. The memory
// store, run the same way, is the reference.
func TestPacedContentionStaysWithinLimitDynamo(t *testing.T) {
	rule := strategy.Rule{Limit: 20, Window: time.Second, Granularity: 10 * time.Millisecond}
	const callers, total, deadline = 64, 80, time.Minute
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
			start := time.Now()
			grants, arrivals, storeErrs := paceRun(t, c.store, rule, c.transports, callers, total, deadline)
			took := time.Since(start)
			peak, violations := strictPeak(grants, rule.Window, rule.Limit)
			upPeak, _ := strictPeak(arrivals, rule.Window, rule.Limit)
			arrived := int64(len(arrivals))
			least := time.Duration((total-1)/rule.Limit) * rule.Window // the first 20 at once, then 20 a second
			t.Logf("%s: %d granted, %d arrived (peak %d in %v at the upstream), %d store errors; grants: peak %d in %v, %d violations; %d requests in %v, at least %v at the limit's rate",
				c.name, len(grants), arrived, upPeak, rule.Window, storeErrs, peak, rule.Window, violations, total, took.Round(time.Millisecond), least)
			// More arrivals than grants would be requests sent uncounted.
			if arrived > int64(len(grants)) {
				t.Errorf("%d requests reached the upstream, %d were granted: %d sent uncounted", arrived, len(grants), arrived-int64(len(grants)))
			}
			if violations != 0 || peak > rule.Limit {
				t.Errorf("the store granted up to %d in %v against %d (%d violations)", peak, rule.Window, rule.Limit, violations)
			}
			if storeErrs != 0 {
				t.Errorf("%d store errors reported, want 0: contention is not an outage", storeErrs)
			}
			if len(grants) != total || arrived != int64(total) {
				t.Errorf("%d granted and %d arrived, each within a deadline of %v; want all %d", len(grants), arrived, deadline, total)
			}
		})
	}
}

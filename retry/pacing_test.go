package retry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// grantLog is the memory store keeping the instant of every slot it granted (Reserve's
// Result.At) and taking back the slots released: the instants the rule holds at, before the
// delivery to the upstream adds its own delay.
type grantLog struct {
	*cache.Memory
	log storetest.GrantLog
}

func (g *grantLog) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := g.Memory.Reserve(ctx, s, key, n)
	if err == nil && res.Allowed {
		g.log.Granted(res.At, n)
	}
	return res, err
}

func (g *grantLog) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	err := g.Memory.Release(ctx, s, key, at, n)
	if err == nil {
		g.log.Released(at, n)
	}
	return err
}

// TestRetriesPacedOneAttemptPerSecond is the case: a limit of 1 per second, the first
// attempt gets a 500 and is retried, and a second request starts at the same moment. Every attempt,
// the retry included, goes through the paced Transport: the store grants the three attempts slots
// at least the window and the rule's 100 ms margin apart (the margin covers the time between the
// Transport's reservation and the upstream's arrival), less one 10 ms bucket. The gaps the upstream saw are logged: on the
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
	grants := store.log.Instants()
	if len(grants) != 3 {
		t.Fatalf("the store granted %d slots, want 3: one for each attempt", len(grants))
	}
	for i := 1; i < len(grants); i++ {
		t.Logf("attempts %d and %d: granted %v apart, arrived %v apart", i, i+1, grants[i].Sub(grants[i-1]), arrivals[i].Sub(arrivals[i-1]))
		// The window and its margin, less one bucket: a count's age is read in 10 ms buckets.
		if gap, least := grants[i].Sub(grants[i-1]), 1090*time.Millisecond; gap < least {
			t.Fatalf("attempts %d and %d granted %v apart, want ≥ %v", i, i+1, gap, least)
		}
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

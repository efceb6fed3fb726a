package transporttest

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
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestCostCorrectionRaceRedis: two Transports (two processes) over one Redis store, 40
// goroutines, each request charged 5 and reported at 1, on a rule of 10 a minute: the
// upstream never receives more than 10 in the minute, and after all the store counts exactly
// what reached the upstream (every give-back took the request's own slots, none twice).
func TestCostCorrectionRaceRedis(t *testing.T) {
	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{Prefix: "review-cost-race:"})
	var hits atomic.Int64
	up := upstreamtest.Cost(t, "1", &hits)
	var trs []*ratemonitor.Transport
	for range 2 {
		trs = append(trs, newTransport(t, up.Client().Transport, ratemonitor.WithStore(store), ratemonitor.WithPacing(),
			ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
			ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
			ratemonitor.WithCost(func(*http.Request) int { return 5 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost)))
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			err := upstreamtest.SendWithin(trs[i%2], up.URL, 10*time.Second) // a wait of ~1 min fails at once (DeadlineError)
			var de *ratemonitor.DeadlineError
			if err != nil && !errors.As(err, &de) && !errors.Is(err, context.DeadlineExceeded) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := hits.Load(); n > 10 || n < 2 {
		t.Errorf("upstream received %d in the minute, want 2 to 10", n)
	}
	if u := used(t, trs[0], "k"); u != int(hits.Load()) {
		t.Errorf("store counts %d after %d requests of real cost 1", u, hits.Load())
	}
}

// behind is the real clock d behind: a host whose clock is behind the Redis server's.
type behind struct{ d time.Duration }

func (b behind) Now() time.Time { return clock.Real().Now().Add(-b.d) }
func (b behind) Sleep(ctx context.Context, d time.Duration) error {
	return clock.Real().Sleep(ctx, d)
}

// tokenBucketGiveBack: a query charged 5 (the estimate) on a bucket of 10 refilled at 10 a
// second, over store; while it runs (a slow mutation of 1.2 s), the bucket refills to full and
// ten 1-point queries empty it; then the answer says the query cost 1. The upstream's bucket
// is empty (it was full whatever the first query cost, and the ten took all of it), so
// nothing may be given back: the refill since the charge already paid it. It returns the
// bucket's usage after. opts are added to the Transport's.
func tokenBucketGiveBack(t *testing.T, store *redisstore.Store, opts ...ratemonitor.Option) int {
	t.Helper()
	rule, err := tokenbucket.Rule(10, 10)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tokenbucket.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	var tr *ratemonitor.Transport
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	defer small.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1200 * time.Millisecond)
		for range 10 {
			req, _ := http.NewRequest(http.MethodGet, small.URL, nil)
			req.Header.Set("X-Cost", "1")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}
		w.Header().Set("X-Real-Cost", "1")
	}))
	defer slow.Close()
	opts = append([]ratemonitor.Option{ratemonitor.WithStrategy(s), ratemonitor.WithPacing(), ratemonitor.WithStore(store),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "shop" }),
		ratemonitor.WithCost(func(r *http.Request) int {
			if r.Header.Get("X-Cost") == "1" {
				return 1
			}
			return 5
		}),
		ratemonitor.WithCostReport(upstreamtest.HeaderCost)}, opts...)
	tr, err = ratemonitor.New(slow.Client().Transport, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := upstreamtest.SendWithin(tr, slow.URL, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return used(t, tr, "shop")
}

// TestTokenBucketNoGiveBackAfterRefillRedis: see tokenBucketGiveBack (the Redis store's
// token-bucket script): more than 6 used, nothing given back (review H2 of issue 15; the
// memory store's case is the core's TestTokenBucketNoGiveBackAfterRefill).
func TestTokenBucketNoGiveBackAfterRefillRedis(t *testing.T) {
	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{Prefix: "review-tb-giveback"})
	if u := tokenBucketGiveBack(t, store); u <= 6 {
		t.Errorf("used %d after the give-back, want 10 (more than 6 at least: the bucket refills 1 in 100 ms)", u)
	}
}

// TestTokenBucketGiveBackHostClockBehindRedis: the same with this host's clock 5 s behind the
// Redis server's TIME: the elapsed time since the charge is measured on the Transport's own
// clock (1.2 s), not against Redis TIME (negative): used stays above 6 (no give-back of 4; the
// bucket refills 1 in 100 ms while the test reads it).
func TestTokenBucketGiveBackHostClockBehindRedis(t *testing.T) {
	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{Prefix: "rev3-tb-skew"})
	if u := tokenBucketGiveBack(t, store, ratemonitor.WithClock(behind{5 * time.Second})); u <= 6 {
		t.Errorf("used %d after the give-back with the host clock 5 s behind Redis, want 10 (more than 6 at least: the bucket refills 1 in 100 ms)", u)
	}
}

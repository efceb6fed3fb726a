package transporttest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/costcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestCostCorrectionRaceCountsOnceOverRedis: two Transports (two processes) over one Redis store, 40
// goroutines, each request charged 5 and reported at 1, on a rule of 10 a minute: the
// upstream never receives more than 10 in the minute, and after all the store counts exactly
// what reached the upstream (every give-back took the request's own slots, none twice).
func TestCostCorrectionRaceCountsOnceOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{Prefix: "cost-race:"})
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

// behind is a clock d behind base: a host whose clock is behind the Redis server's.
type behind struct {
	base clock.Clock
	d    time.Duration
}

func (b behind) Now() time.Time { return b.base.Now().Add(-b.d) }
func (b behind) Sleep(ctx context.Context, d time.Duration) error {
	return b.base.Sleep(ctx, d)
}

// tokenBucketGiveBack is costcheck.TokenBucketGiveBack over a Redis store on the manual clock
// clk (Options.Clock: the token-bucket script reads it instead of Redis TIME), on a bucket
// refilled 10 a second, with a mutation of 1.2 s on clk: nothing refills while the test
// reads the bucket, so its figure is exact. opts are added to the Transport's (its clock).
func tokenBucketGiveBack(t *testing.T, srv *redistest.Server, prefix string, clk *clock.Manual, opts ...ratemonitor.Option) int {
	t.Helper()
	store := newStore(t, srv, redisstore.Options{Prefix: prefix, Clock: clk})
	slow := func() { clk.Advance(1200 * time.Millisecond) }
	return costcheck.TokenBucketGiveBack(t, 10, slow, append([]ratemonitor.Option{ratemonitor.WithStore(store)}, opts...)...)
}

// TestTokenBucketNoGiveBackAfterRefillRedis: see tokenBucketGiveBack (the Redis store's
// token-bucket script): 10 used, nothing given back (review H2 of issue 15; the memory store's
// case is the core's TestTokenBucketNoGiveBackAfterRefill).
func TestTokenBucketNoGiveBackAfterRefillRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	if u := tokenBucketGiveBack(t, srv, "tb-giveback", clk, ratemonitor.WithClock(clk)); u != 10 {
		t.Errorf("used %d after the give-back, want 10 (6: the 4 given back)", u)
	}
}

// TestTokenBucketGiveBackHostClockBehindRedis: the same with this host's clock 5 s behind the
// Redis server's: the elapsed time since the charge is measured on the Transport's own clock
// (1.2 s), not against the server's (negative): 10 used, no give-back of 4.
func TestTokenBucketGiveBackHostClockBehindRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	if u := tokenBucketGiveBack(t, srv, "rev3-tb-skew", clk, ratemonitor.WithClock(behind{clk, 5 * time.Second})); u != 10 {
		t.Errorf("used %d after the give-back with the host clock 5 s behind Redis, want 10 (6: the 4 given back)", u)
	}
}

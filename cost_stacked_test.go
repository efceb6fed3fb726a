package ratemonitor_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestStackedBothCorrectUpOnce: outer and inner Transports on one store and the same
// counters, both with WithCost (1) and WithCostReport: the outer charged the attempt (its mark
// carries cost 1), the upstream says 10. Only the outer corrects its charge (up by 9): used is
// exactly 10 after the one request sent, not 19.
func TestStackedBothCorrectUpOnce(t *testing.T) {
	if u, sent := stackedCostUsed(t, "10", 1, 30); u != 10 || sent != 1 {
		t.Errorf("stacked, both with cost and report: used %d after one request (%d sent) the upstream says cost 10, want 10", u, sent)
	}
}

// stackedCostUsed sends one request through two Transports stacked on one memory store and
// the same counters (limit a minute), both charging charge (WithCost) and correcting from
// the upstream's reported cost (WithCostReport), and returns what the key then uses and how
// many requests the upstream received.
func stackedCostUsed(t *testing.T, reported string, charge, limit int) (int, int64) {
	t.Helper()
	var hits atomic.Int64
	up := upstreamtest.Cost(t, reported, &hits)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	common := []ratemonitor.Option{ratemonitor.WithStore(store), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: limit, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		ratemonitor.WithCost(func(*http.Request) int { return charge }), ratemonitor.WithCostReport(upstreamtest.HeaderCost)}
	inner, err := ratemonitor.New(up.Client().Transport, common...)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	outer, err := ratemonitor.New(inner, common...)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	if err := upstreamtest.SendWithin(outer, up.URL, time.Second); err != nil {
		t.Fatal(err)
	}
	return used(t, outer, "k"), hits.Load()
}

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
	var hits atomic.Int64
	up := upstreamtest.Cost(t, "10", &hits)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	common := []ratemonitor.Option{ratemonitor.WithStore(store), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 30, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		ratemonitor.WithCost(func(*http.Request) int { return 1 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost)}
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
	if u := used(t, outer, "k"); u != 10 || hits.Load() != 1 {
		t.Errorf("stacked, both with cost and report: used %d after one request (%d sent) the upstream says cost 10, want 10", u, hits.Load())
	}
}

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

// TestStackedCostCorrectedOnce: outer and inner Transports on one store and the same
// counters, both with WithCost and WithCostReport: the outer charges the attempt (its mark
// carries the charge) and corrects it to the upstream's cost, down or up; the inner does
// neither, so the key uses exactly the reported cost after the one request sent (not the sum of
// two corrections: 19 where the upstream says 10).
func TestStackedCostCorrectedOnce(t *testing.T) {
	for _, c := range []struct {
		name          string
		reported      string
		charge, limit int
		wantUsed      int
	}{
		{"charged 5, cost 2", "2", 5, 10, 2},
		{"charged 1, cost 10", "10", 1, 30, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			if u, sent := stackedCostUsed(t, c.reported, c.charge, c.limit); u != c.wantUsed || sent != 1 {
				t.Errorf("stacked, both with cost and report, charged %d: used %d after one request (%d sent) the upstream says cost %s, want %d", c.charge, u, sent, c.reported, c.wantUsed)
			}
		})
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
	if err := upstreamtest.SendWithin(outer, up.URL, sendLimit); err != nil {
		t.Fatal(err)
	}
	return used(t, outer, "k"), hits.Load()
}

// TestStackedInnerCorrectsOuterCharge: an inner Transport with WithCost and WithCostReport under
// an outer one without them, on one store and the same counters: the outer's charge (1) is
// corrected up by the inner to the reported 10.
func TestStackedInnerCorrectsOuterCharge(t *testing.T) {
	var hits atomic.Int64
	up := upstreamtest.Cost(t, "10", &hits)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	common := []ratemonitor.Option{ratemonitor.WithStore(store), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" })}
	inner, err := ratemonitor.New(up.Client().Transport, append(common,
		ratemonitor.WithCost(func(*http.Request) int { return 10 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost))...)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	outer, err := ratemonitor.New(inner, common...)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	if err := upstreamtest.SendWithin(outer, up.URL, sendLimit); err != nil {
		t.Fatal(err)
	}
	if u := used(t, outer, "k"); u != 10 {
		t.Errorf("stacked, cost on the inner Transport: used %d after a request of cost 10, want 10", u)
	}
}

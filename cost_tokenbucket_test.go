package ratemonitor_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/costcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestTokenBucketGiveBackLessRefill: on a bucket of 10 refilled at 1 a second, 3 spent, then a
// query charged 5 that runs 2 s and costs 1: of the 4 to give back, the 2 tokens refilled
// since the charge may have paid them, so 2 are given back: used 8 − 2 (refill) − 2 = 4 (a
// give-back of all 4 would leave 2).
func TestTokenBucketGiveBackLessRefill(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Cost") == "5" {
			clk.Advance(2 * time.Second)
			w.Header().Set("X-Real-Cost", "1")
		}
	}))
	defer srv.Close()
	rule, err := tokenbucket.Rule(10, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tokenbucket.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ratemonitor.New(srv.Client().Transport, ratemonitor.WithStrategy(s), ratemonitor.WithPacing(),
		ratemonitor.WithClock(clk), ratemonitor.WithKeyFunc(func(*http.Request) string { return "shop" }),
		ratemonitor.WithCost(func(r *http.Request) int { n, _ := strconv.Atoi(r.Header.Get("X-Cost")); return n }),
		ratemonitor.WithCostReport(upstreamtest.HeaderCost))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, c := range []string{"3", "5"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Cost", c)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if u := used(t, tr, "shop"); u != 4 {
		t.Errorf("used %d after the give-back, want 4", u)
	}
}

// TestTokenBucketNoGiveBackAfterRefill: see costcheck.TokenBucketGiveBack (memory store, virtual
// time: a bucket refilled 1 a second, a mutation of 11 s): used stays 10, nothing given back.
// The Redis store's case is in the Redis module's transporttest.
func TestTokenBucketNoGiveBackAfterRefill(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	if u := costcheck.TokenBucketGiveBack(t, 1, func() { clk.Advance(11 * time.Second) }, ratemonitor.WithClock(clk)); u != 10 {
		t.Errorf("used %d after the give-back, want 10 (the upstream's bucket is empty)", u)
	}
}

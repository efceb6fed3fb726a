// Package costcheck is the cost-correction scenarios that the core runs over the memory store
// and the Redis module over the Redis store (which reach it through the core's path prefix):
// one copy, so that both stores are held to the same case.
package costcheck

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/transportcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TokenBucketGiveBack: a query charged 5 (the estimate) on a bucket of 10 refilled at rate a
// second; while it runs (a slow mutation: run, which lets the bucket's time pass on the store's
// clock, virtual or real), the bucket refills to full and ten 1-point queries empty it; then
// the answer says the query cost 1. The upstream's bucket is empty (it was full whatever the
// first query cost, and the ten took all of it), so nothing may be given back: the refill
// since the charge already paid it. It returns the bucket's usage after. opts (the store, the
// clock) are added to the Transport's.
func TokenBucketGiveBack(t testing.TB, rate float64, run func(), opts ...ratemonitor.Option) int {
	t.Helper()
	rule, err := tokenbucket.Rule(10, rate)
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
		run()
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
	opts = append([]ratemonitor.Option{ratemonitor.WithStrategy(s), ratemonitor.WithPacing(),
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
	return transportcheck.Used(t, tr, "shop")
}

package ratemonitor_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rm "github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestStackedMeterNotChargedOutsideIsChargedInside: outer and inner Transports over one memory
// store both keep meter "m" (same rules, same key). The outer's Meter.Cost is 0 for GETs (the
// meter does not apply there); the inner's charges every request. A GET through both is not
// charged on "m" by the outer, yet the outer's mark says "m" was counted, so the inner skips it:
// the meter is never charged for the GET (an under-count).
func TestStackedMeterNotChargedOutsideIsChargedInside(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer s.Close()
	st, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key := strategy.Rule{Limit: 100, Window: time.Minute}
	mrules := []strategy.Rule{{Limit: 10, Window: time.Minute}}
	inner, err := rm.New(nil, rm.WithStore(st), rm.WithRules(key), rm.WithKeyFunc(rm.KeyByHost),
		rm.WithMeter(rm.Meter{Name: "m", AppKey: "m-app", Rules: mrules}))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := rm.New(inner, rm.WithStore(st), rm.WithRules(key),
		rm.WithMeter(rm.Meter{Name: "m", AppKey: "m-app", Rules: mrules, Cost: func(r *http.Request) int {
			if r.Method == http.MethodGet {
				return 0
			}
			return 1
		}}))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL, nil)
	resp, err := outer.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hk := req.URL.Host
	ku, _ := inner.AllocationUsed(context.Background(), hk)
	mu, err := inner.Meter("m").AllocationUsed(context.Background(), hk)
	if err != nil {
		t.Fatal(err)
	}
	if ku[0].Used != 1 || mu[0].Used != 1 {
		t.Errorf("after one GET through both: key holds %d (want 1), meter m holds %d (want 1: the inner meter charges GETs)", ku[0].Used, mu[0].Used)
	}
}

package profiles_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestShopifySmallerBucketFullWaits: after X-Shopify-Shop-Api-Call-Limit: 10/10 (a bucket smaller
// than the rule's 40, full) the next request waits.
func TestShopifySmallerBucketFullWaits(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.ShopifyREST().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Shopify-Shop-Api-Call-Limit", "10/10")
	}))
	defer srv.Close()
	req := request(srv.URL)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	w, err := tr.WaitTime(context.Background(), tr.Key(req), 1)
	if err != nil || w == 0 {
		t.Errorf("after X-Shopify-Shop-Api-Call-Limit: 10/10, the next request may go in %v (%v): Shopify's bucket is full", w, err)
	}
}

// TestShopifyAbsurdCostNotRecorded: an actualQueryCost of 2e9 (more than the bucket) is not
// recorded: the shop waits at most the bucket's 20 s.
func TestShopifyAbsurdCostNotRecorded(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.ShopifyGraphQL(1000, 50, nil).Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":{},"extensions":{"cost":{"requestedQueryCost":1,"actualQueryCost":2000000000}}}`))
	}))
	defer srv.Close()
	req := request(srv.URL)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	w, err := tr.WaitTime(context.Background(), tr.Key(req), 1)
	if err != nil || w > 20*time.Second {
		t.Errorf("after one answer of cost 2e9 the shop waits %v (%v), want at most the bucket's 20 s", w, err)
	}
}

// TestShopifyThrottledPausesTheShop: Shopify answers a query the bucket cannot hold with 200 and
// THROTTLED; without an estimate each query is charged 1, so only the answer's pause keeps the
// next query from being throttled as well. Bucket 1000 restored at 50 a second, queries asking
// 300 and costing 250, sent one after another: three run from the full bucket (250 left); the
// fourth is throttled and pauses the shop (300 − 250) / 50 = 1 s, after which the fifth runs
// (50 left); from then on every throttled query pauses the shop (300 − 50) / 50 = 5 s and the
// next one runs. Of 40: 21 run, 19 throttled, never two in a row.
func TestShopifyThrottledPausesTheShop(t *testing.T) {
	s, _ := drive(t, profiles.ShopifyGraphQL(1000, 50, nil).Options(), func(now func() time.Time) standIn {
		return standin.NewShopifyGraphQL(now, 1000, 50)
	}, 40, func(i int, url string) *http.Request {
		return request(url, "X-Standin-Requested-Cost", "300", "X-Standin-Actual-Cost", "250")
	})
	if n, _, _ := s.Accepted(); n != 21 || s.Refused() != 19 {
		t.Errorf("of 40 queries %d ran and %d were throttled, want 21 and 19", n, s.Refused())
	}
}

package ratemonitor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// A GraphQL query is charged its estimated cost before it is sent, and corrected to the cost
// the upstream reports (here Shopify's extensions.cost): 50 points reserved, 12 kept.
func ExampleWithCostReport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":{},"extensions":{"cost":{"requestedQueryCost":50,"actualQueryCost":12,`+
			`"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":988.0,"restoreRate":50.0}}}}`)
	}))
	defer srv.Close()

	rule, err := tokenbucket.Rule(1000, 50) // a bucket of 1000 points, 50 a second
	if err != nil {
		fmt.Println(err)
		return
	}
	bucket, err := tokenbucket.New(rule)
	if err != nil {
		fmt.Println(err)
		return
	}
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	tr, err := ratemonitor.New(nil, ratemonitor.WithStore(store), ratemonitor.WithStrategy(bucket), ratemonitor.WithPacing(),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "shop" }),
		ratemonitor.WithCost(func(req *http.Request) int { n, _ := strconv.Atoi(req.Header.Get("X-Query-Cost")); return max(n, 1) }),
		ratemonitor.WithCostReport(cost.ShopifyGraphQL(rule.Window)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()

	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"query":"{ shop { name } }"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("X-Query-Cost", "50") // the query's requested cost, computed by the caller
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, err := io.ReadAll(resp.Body) // the body is whole: the reader put back what it read
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	used, err := tr.AllocationUsed(context.Background(), "shop")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("points used: %d; body of %d bytes\n", used[0].Used, len(body))
	// Output: points used: 12; body of 171 bytes
}

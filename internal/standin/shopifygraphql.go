package standin

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ShopifyGraphQL stands in for Shopify's GraphQL Admin API: per store (the request's host) a
// bucket of Size points restored at Rate a second
// (shopify.dev/docs/apps/build/apis/graphql-admin/rate-limits). A query runs only when the
// bucket holds its requested cost, and is charged its actual cost; every answer carries
// extensions.cost (requestedQueryCost, actualQueryCost, throttleStatus with maximumAvailable,
// currentlyAvailable and restoreRate), and a query that does not fit is answered 200 with the
// error "Throttled" (extensions.code THROTTLED) and actualQueryCost null.
//
// A test says what each query costs in the request's X-Standin-Requested-Cost and
// X-Standin-Actual-Cost header fields (default 1 each): the stand-in does not parse GraphQL.
type ShopifyGraphQL struct {
	Now  func() time.Time
	Size float64
	Rate float64
	Counts

	mu     sync.Mutex
	stores map[string]*bucket
}

// NewShopifyGraphQL returns a Shopify GraphQL stand-in of a bucket of size points restored at
// rate a second, reading instants from now.
func NewShopifyGraphQL(now func() time.Time, size, rate float64) *ShopifyGraphQL {
	return &ShopifyGraphQL{Now: now, Size: size, Rate: rate, stores: map[string]*bucket{}}
}

func costField(r *http.Request, name string) float64 {
	v, err := strconv.ParseFloat(r.Header.Get(name), 64)
	if err != nil || v < 0 {
		return 1
	}
	return v
}

func (s *ShopifyGraphQL) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	date(w, now)
	b := s.stores[r.Host]
	if b == nil {
		b = &bucket{size: s.Size, rate: s.Rate}
		s.stores[r.Host] = b
	}
	b.drain(now)
	requested, actual := costField(r, "X-Standin-Requested-Cost"), costField(r, "X-Standin-Actual-Cost")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	status := func(actual string) string {
		return fmt.Sprintf(`"extensions":{"cost":{"requestedQueryCost":%g,"actualQueryCost":%s,"throttleStatus":{"maximumAvailable":%.1f,"currentlyAvailable":%.1f,"restoreRate":%.1f}}}`,
			requested, actual, b.size, b.size-b.level, b.rate)
	}
	if b.size-b.level+1e-9 < requested {
		s.refuse()
		fmt.Fprintf(w, `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED","documentation":"https://shopify.dev/api/usage/rate-limits"}}],%s}`, status("null"))
		return
	}
	b.level += actual
	s.accept(now)
	fmt.Fprintf(w, `{"data":{"shop":{"name":"stand-in"}},%s}`, status(strconv.FormatFloat(actual, 'g', -1, 64)))
}

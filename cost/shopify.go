package cost

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
)

// shopifyCost is the extensions.cost object of a Shopify GraphQL Admin API response. Source:
// Shopify, "GraphQL Admin API rate limits", https://shopify.dev/docs/apps/build/apis/graphql-admin/rate-limits:
// requestedQueryCost is what the bucket must hold before the query runs, actualQueryCost what
// it was charged (the difference is refunded; null when the query was throttled), and
// throttleStatus the bucket after it: maximumAvailable points, currentlyAvailable of them,
// refilled at restoreRate points a second.
type shopifyCost struct {
	RequestedQueryCost *float64 `json:"requestedQueryCost"`
	ActualQueryCost    *float64 `json:"actualQueryCost"`
	ThrottleStatus     *struct {
		MaximumAvailable   *float64 `json:"maximumAvailable"`
		CurrentlyAvailable *float64 `json:"currentlyAvailable"`
		RestoreRate        *float64 `json:"restoreRate"`
	} `json:"throttleStatus"`
}

// parseShopifyCost reads extensions.cost from a GraphQL response body; ok is false when the
// body is not JSON or has no such object.
func parseShopifyCost(body []byte) (c shopifyCost, ok bool) {
	var doc struct {
		Extensions struct {
			Cost *shopifyCost `json:"cost"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Extensions.Cost == nil {
		return shopifyCost{}, false
	}
	return *doc.Extensions.Cost, true
}

// ShopifyGraphQL returns a Reader of Shopify's extensions.cost for a key whose rule is the
// bucket, with the given window (tokenbucket.Rule(bucket, restoreRate) gives it: the time an
// empty bucket takes to fill). The cost is actualQueryCost, rounded up. throttleStatus gives
// the remaining points (currentlyAvailable, rounded down) of a bucket of maximumAvailable. A
// throttled query (Shopify answers 200, actualQueryCost null: the bucket held less than
// requestedQueryCost) reports Unknown, its charge standing, and a Pause until the bucket holds
// it: (requestedQueryCost − currentlyAvailable) / restoreRate, rounded up to the millisecond,
// at most window. The header says nothing: all comes from the body, once read. Of a body
// longer than MaxBody, the last "extensions" member in its last 64 KiB is read. It
// declares that one window.
func ShopifyGraphQL(window time.Duration) Declared {
	body := func(_ *http.Response, b Body, _ time.Time) Report {
		rep := Report{Cost: Unknown}
		c, ok := shopifyBody(b)
		if !ok {
			return rep
		}
		rep.Cost = points(c.ActualQueryCost)
		if ts := c.ThrottleStatus; ts != nil && ts.CurrentlyAvailable != nil && *ts.CurrentlyAvailable >= 0 && *ts.CurrentlyAvailable <= 1<<31 {
			sig := headers.Signal{Window: window, Remaining: int(*ts.CurrentlyAvailable), Limit: headers.Unknown, Reset: headers.Unknown}
			if m := points(ts.MaximumAvailable); m != Unknown {
				sig.Limit = m
			}
			rep.Signals = []headers.Signal{sig}
		}
		rep.Pause = shopifyThrottled(c, window)
		return rep
	}
	return declare(fmt.Sprintf("cost.ShopifyGraphQL(%v)", window), nil, body, headers.Window{Window: window})
}

// shopifyThrottled returns how long until the bucket holds the requested cost of a query
// Shopify throttled (c's actualQueryCost null, its requestedQueryCost above currentlyAvailable),
// at most window; 0 for a query that ran, or figures that do not say.
func shopifyThrottled(c shopifyCost, window time.Duration) time.Duration {
	ts := c.ThrottleStatus
	if c.ActualQueryCost != nil || c.RequestedQueryCost == nil || ts == nil || ts.CurrentlyAvailable == nil || ts.RestoreRate == nil {
		return 0
	}
	missing, rate := *c.RequestedQueryCost-*ts.CurrentlyAvailable, *ts.RestoreRate
	if !(missing > 0) || !(rate > 0) {
		return 0
	}
	secs := missing / rate
	if !(secs < window.Seconds()) {
		return window
	}
	return time.Duration(math.Ceil(secs*1000-1e-6)) * time.Millisecond // 3.6 s, not 3.601 s
}

func shopifyBody(b Body) (shopifyCost, bool) {
	if b.Whole {
		return parseShopifyCost(b.Head)
	}
	var ext struct {
		Cost *shopifyCost `json:"cost"`
	}
	if member(b.Tail, "extensions", &ext) && ext.Cost != nil {
		return *ext.Cost, true
	}
	return shopifyCost{}, false
}

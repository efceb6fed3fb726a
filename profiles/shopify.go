package profiles

import (
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// Shopify's REST Admin API limits on the Standard plan: a leaky bucket of 40 requests per app
// and store, leaking 2 a second. Source: Shopify, "REST Admin API rate limits",
// https://shopify.dev/docs/api/admin-rest/usage/rate-limits, and "Shopify API limits",
// https://shopify.dev/docs/api/usage/limits (the leaky bucket).
const (
	shopifyRESTBucket   = 40
	shopifyRESTLeakRate = 2 // requests a second
)

// ShopifyREST paces a Shopify REST Admin API client of one app: requests are keyed by host
// (each store has its own shop.myshopify.com domain), each held to a token bucket of 40
// refilled at 2 a second (tokenbucket.Rule(40, 2): the bucket empties in 20 s), with a 500 ms
// margin (the bucket refills over 20.5 s, 1.95 a second) for the time between recording a
// request and Shopify counting it.
//
// It reads X-Shopify-Shop-Api-Call-Limit ("32/40": the bucket's level and size) on every
// response (headers.ShopifyReader), raising the count to the bucket's level; a bucket Shopify
// reports smaller than 40 leaves exactly its free room ("10/10": the bucket is full). If a
// 429's Retry-After is a fraction ("2.0"), which RFC 9110 does not allow and the monitor does
// not read, the pause is the fallback, 2 s, the time the bucket takes to leak a few requests.
func ShopifyREST() Profile {
	rule, err := tokenbucket.Rule(shopifyRESTBucket, shopifyRESTLeakRate)
	if err != nil {
		return failed("profiles.ShopifyREST", "ShopifyREST: %v", err)
	}
	window := rule.Window
	rule.Margin = 500 * time.Millisecond
	return Profile{
		Name:      "profiles.ShopifyREST",
		Key:       ratemonitor.KeyByHost,
		Rules:     []strategy.Rule{rule},
		Algorithm: tokenbucket.New,
		Sync: &ratemonitor.SyncConfig{
			Readers:  []headers.Reader{headers.ShopifyReader(window)},
			Fallback: 2 * time.Second,
		},
		Pacing: true,
	}
}

// ShopifyGraphQL paces a Shopify GraphQL Admin API client of one app in points: requests are
// keyed by host (the store), each store held to a token bucket of bucket points refilled at
// restoreRate points a second, the figures of the store's plan (Shopify, "GraphQL Admin API
// rate limits", https://shopify.dev/docs/apps/build/apis/graphql-admin/rate-limits: 100 points a
// second on the Standard plan, 1000 on Shopify Plus; every response's
// extensions.cost.throttleStatus gives maximumAvailable and restoreRate).
//
// Each query is charged estimate(req) points before it is sent (Shopify requires the bucket to
// hold a query's requestedQueryCost before running it; nil charges 1), and corrected to the
// actualQueryCost of the response (cost.ShopifyGraphQL: the difference is given back, as
// Shopify refunds it); throttleStatus.currentlyAvailable raises the count to Shopify's, and a
// THROTTLED answer pauses the store until the bucket holds the query's requestedQueryCost. A
// bucket below 1, a rate that is not positive, or a pair beyond a token bucket's range makes
// New fail.
func ShopifyGraphQL(bucket int, restoreRate float64, estimate func(*http.Request) int) Profile {
	rule, err := tokenbucket.Rule(bucket, restoreRate)
	if err != nil {
		return failed("profiles.ShopifyGraphQL", "ShopifyGraphQL(%d, %v): %v", bucket, restoreRate, err)
	}
	return Profile{
		Name:       "profiles.ShopifyGraphQL",
		Key:        ratemonitor.KeyByHost,
		Rules:      []strategy.Rule{rule},
		Algorithm:  tokenbucket.New,
		Cost:       estimate,
		CostReport: cost.ShopifyGraphQL(rule.Window),
		Sync:       &ratemonitor.SyncConfig{Readers: []headers.Reader{}, Fallback: time.Second},
		Pacing:     true,
	}
}

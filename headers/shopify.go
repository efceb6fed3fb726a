package headers

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// shopifyCallLimit is Shopify's X-Shopify-Shop-Api-Call-Limit field, "32/40": the requests in
// the app's leaky bucket for the shop, and the bucket's size. Source: Shopify, "REST Admin API
// rate limits", https://shopify.dev/docs/api/admin-rest/usage/rate-limits.
type shopifyCallLimit struct {
	Used int // requests in the bucket, or Unknown
	Size int // the bucket's size, or Unknown
}

// parseShopifyCallLimit reads X-Shopify-Shop-Api-Call-Limit from h. Anything but two
// non-negative whole numbers around one "/" gives Unknown for both.
func parseShopifyCallLimit(h http.Header) shopifyCallLimit {
	unknown := shopifyCallLimit{Used: Unknown, Size: Unknown}
	used, size, ok := strings.Cut(strings.TrimSpace(h.Get(fieldShopifyCallLimit)), "/")
	if !ok {
		return unknown
	}
	u, okU := headerparse.Unsigned(strings.TrimSpace(used))
	s, okS := headerparse.Unsigned(strings.TrimSpace(size))
	if !okU || !okS || u > 1<<31 || s > 1<<31 {
		return unknown
	}
	return shopifyCallLimit{Used: int(u), Size: int(s)}
}

// ShopifyReader returns a Reader of X-Shopify-Shop-Api-Call-Limit for the request's key's rule
// with the given window: with tokenbucket.Rule(40, 2) that is 20 s, the time Shopify's bucket of
// 40 takes to drain at 2 a second. The bucket's size is the upstream's limit and its free room
// (size − used) the remaining count; the field gives no reset. It declares that one window.
func ShopifyReader(window time.Duration) Declared {
	read := func(h http.Header, _ time.Time) Report {
		c := parseShopifyCallLimit(h)
		if c.Used == Unknown {
			return Report{}
		}
		return Report{Signals: []Signal{{Window: window, Remaining: max(0, c.Size-c.Used), Limit: c.Size, Reset: Unknown}}}
	}
	return Declare(fmt.Sprintf("headers.ShopifyReader(%v)", window), read, Window{Window: window})
}

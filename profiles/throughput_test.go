package profiles_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestProfilesReachLimitsWithoutRefusal: each profile, driven one request after another against
// its API's stand-in on a virtual clock (drive), is never refused and gets at least 95 % of what
// the API's limits allow over the run (check): several minutes of requests, or windows' worth.
// The clock is simulated, so the throughput does not depend on the machine's load.
func TestProfilesReachLimitsWithoutRefusal(t *testing.T) {
	// Shopify GraphQL: queries that request 100 points and cost 40, on a bucket of 1000
	// restored at 50 a second: each is charged 100 and corrected to 40.
	const size, rate, requested, actual = 1000, 50, 100, 40
	estimate := func(req *http.Request) int {
		n, _ := strconv.Atoi(req.Header.Get("X-Standin-Requested-Cost"))
		return n
	}
	// Slack: Tier 2 methods, two of them on one token: each method has its own 20 a minute.
	const slackPerMinute = 20
	for _, c := range []struct {
		name    string
		profile []ratemonitor.Option
		// inProcess serves the stand-in without a socket (driveOn): for the runs of thousands
		// of requests.
		inProcess bool
		standIn   func(now func() time.Time) standIn
		n         int
		request   func(i int, url string) *http.Request
		allowed   func(span time.Duration) float64
	}{
		{"Xero", profiles.Xero("xero-app:test").Options(), false,
			func(now func() time.Time) standIn { return standin.NewXero(now) },
			3 * 2 * profiles.XeroMinuteLimit, // three minutes of two tenants
			func(i int, url string) *http.Request {
				return request(url, "Xero-Tenant-Id", "tenant-"+strconv.Itoa(i%2))
			},
			func(span time.Duration) float64 {
				return float64(2 * rollingAllowed(profiles.XeroMinuteLimit, time.Minute, span))
			}},
		{"GitHubREST", profiles.GitHubREST().Options(), true,
			func(now func() time.Time) standIn { return standin.NewGitHub(now) },
			2 * profiles.GitHubHourLimit,
			func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer ghp_test") },
			func(span time.Duration) float64 {
				return float64(rollingAllowed(profiles.GitHubHourLimit, time.Hour, span))
			}},
		{"ShopifyREST", profiles.ShopifyREST().Options(), false,
			func(now func() time.Time) standIn { return standin.NewShopifyREST(now) },
			profiles.ShopifyRESTBucket + 2*60*profiles.ShopifyRESTLeakRate,
			func(i int, url string) *http.Request { return request(url) },
			func(span time.Duration) float64 {
				return profiles.ShopifyRESTBucket + profiles.ShopifyRESTLeakRate*span.Seconds()
			}},
		{"ShopifyGraphQL", profiles.ShopifyGraphQL(size, rate, estimate).Options(), false,
			func(now func() time.Time) standIn { return standin.NewShopifyGraphQL(now, size, rate) },
			400,
			func(i int, url string) *http.Request {
				return request(url, "X-Standin-Requested-Cost", strconv.Itoa(requested), "X-Standin-Actual-Cost", strconv.Itoa(actual))
			},
			// A query runs while the bucket holds its requested cost: from full, (size −
			// requested) / actual + 1 at once, then one per actual/rate seconds.
			func(span time.Duration) float64 {
				return float64((size-requested)/actual+1) + span.Seconds()*rate/actual
			}},
		{"HubSpot", profiles.HubSpot().Options(), false,
			func(now func() time.Time) standIn { return standin.NewHubSpot(now) },
			3 * profiles.HubSpotTenSecondLimit,
			func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer pat-na1-test") },
			func(span time.Duration) float64 {
				return float64(rollingAllowed(profiles.HubSpotTenSecondLimit, 10*time.Second, span))
			}},
		{"Stripe", profiles.Stripe().Options(), false,
			func(now func() time.Time) standIn { return standin.NewStripe(now) },
			3 * profiles.StripeLiveLimit,
			func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer sk_live_test") },
			func(span time.Duration) float64 {
				return float64(rollingAllowed(profiles.StripeLiveLimit, time.Second, span))
			}},
		{"Slack", profiles.Slack(2).Options(), false,
			func(now func() time.Time) standIn { return standin.NewSlack(now, slackPerMinute) },
			3 * 2 * slackPerMinute,
			func(i int, url string) *http.Request {
				method := []string{"/api/conversations.list", "/api/users.list"}[i%2]
				return request(url+method, "Authorization", "Bearer xoxb-test")
			},
			func(span time.Duration) float64 {
				return float64(2 * rollingAllowed(slackPerMinute, time.Minute, span))
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := driveOn(t, c.inProcess, c.profile, c.standIn, c.n, c.request)
			check(t, s, c.allowed)
		})
	}
}

package profiles_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestRefusalPausesKeyUntilUpstreamFrees: when another client has used the whole allowance, the
// first request is refused in the API's own form (429 or 403, with or without Retry-After), the
// profile reads it and pauses the key, and the next request is sent once the upstream has room
// again: one refusal, never two, and the second request accepted no earlier than the upstream
// frees.
func TestRefusalPausesKeyUntilUpstreamFrees(t *testing.T) {
	const auth = "Bearer test-token"
	cases := []struct {
		name    string
		profile []ratemonitor.Option
		make    func(now func() time.Time) standIn
		req     func(url string) *http.Request
		frees   time.Duration // when the other client's usage frees, from t0 (-1: xeroFrees)
	}{
		{"xero minute", profiles.Xero("xero-app:test").Options(),
			func(now func() time.Time) standIn { x := standin.NewXero(now); x.Use("t1", 60); return x },
			func(url string) *http.Request { return request(url, "Xero-Tenant-Id", "t1") }, -1},
		{"github primary 403", profiles.GitHubREST().Options(),
			func(now func() time.Time) standIn { g := standin.NewGitHub(now); g.Use(auth, 5000); return g },
			func(url string) *http.Request { return request(url, "Authorization", auth) }, time.Hour},
		{"shopify 429 Retry-After 2.0", profiles.ShopifyREST().Options(),
			func(now func() time.Time) standIn {
				s := standin.NewShopifyREST(now)
				s.Use("standin.test", 40)
				return s
			},
			func(url string) *http.Request { return request(url) }, 500 * time.Millisecond},
		{"hubspot 429 without Retry-After", profiles.HubSpot().Options(),
			func(now func() time.Time) standIn { s := standin.NewHubSpot(now); s.Use(auth, 100); return s },
			func(url string) *http.Request { return request(url, "Authorization", auth) }, 10 * time.Second},
		{"stripe 429", profiles.Stripe().Options(),
			func(now func() time.Time) standIn { s := standin.NewStripe(now); s.Use(auth, 100); return s },
			func(url string) *http.Request { return request(url, "Authorization", auth) }, time.Second},
		{"slack 429 Retry-After", profiles.Slack(2).Options(),
			func(now func() time.Time) standIn {
				s := standin.NewSlack(now, 20)
				s.Use(auth, "/api/users.list", 20)
				return s
			},
			func(url string) *http.Request { return request(url+"/api/users.list", "Authorization", auth) }, time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := driveOn(t, true, c.profile, c.make, 3, func(_ int, url string) *http.Request { return c.req(url) })
			n, first, _ := s.Accepted()
			if s.Refused() != 1 || n != 2 {
				t.Fatalf("%d refused, %d accepted; want the first refused and the next two accepted", s.Refused(), n)
			}
			frees := c.frees
			if x, ok := s.(*standin.Xero); ok && frees < 0 {
				// Xero's minute is a fixed window of the tenant's own: it frees at its end.
				frees = x.MinuteEnds("t1", t0).Sub(t0)
			}
			if first.Before(t0.Add(frees)) {
				t.Fatalf("the second request went at %v, before the upstream freed at %v", first.Sub(t0), frees)
			}
		})
	}
}

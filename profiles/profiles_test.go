package profiles_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_800_000_000, 0)

// standIn is a stand-in's counts.
type standIn interface {
	http.Handler
	Accepted() (int, time.Time, time.Time)
	Refused() int
}

// drive sends n requests one after the other through a Transport made of the profile's options
// (and a virtual clock: a paced request's wait moves the clock instead of sleeping), to the
// stand-in s made on that clock, and returns the Transport. mk builds request i for url.
func drive(t *testing.T, profile []ratemonitor.Option, mkStandIn func(now func() time.Time) standIn, n int, mk func(i int, url string) *http.Request) (standIn, *ratemonitor.Transport) {
	return driveOn(t, false, profile, mkStandIn, n, mk)
}

// driveOn is drive; inProcess serves the stand-in through httptest.NewRecorder instead of a
// loopback server (the same handler, header fields and statuses, without a socket per
// request), for the runs of ten thousand requests that must stay well under a second.
func driveOn(t *testing.T, inProcess bool, profile []ratemonitor.Option, mkStandIn func(now func() time.Time) standIn, n int, mk func(i int, url string) *http.Request) (standIn, *ratemonitor.Transport) {
	t.Helper()
	clk := clock.NewManual(t0)
	clk.Auto = true
	s := mkStandIn(clk.Now)
	var base http.RoundTripper = recorderTransport{s}
	url := "http://standin.test"
	if !inProcess {
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		base, url = srv.Client().Transport, srv.URL
	}
	tr, err := ratemonitor.New(base, append(profile, ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	c := &http.Client{Transport: tr}
	for i := range n {
		resp, err := c.Do(mk(i, url))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return s, tr
}

// recorderTransport answers every request with h, through an httptest.ResponseRecorder.
type recorderTransport struct{ h http.Handler }

func (rt recorderTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

func request(url string, header ...string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// rollingAllowed is the most a rolling window of limit per w lets through from empty in a
// span of d from the first request to the last, both included.
func rollingAllowed(limit int, w, d time.Duration) int { return limit * (int(d/w) + 1) }

// check asserts no refusal and at least 95 % of allowed(span) accepted.
func check(t *testing.T, s standIn, allowed func(span time.Duration) float64) {
	t.Helper()
	n, first, last := s.Accepted()
	span := last.Sub(first)
	ratio := float64(n) / allowed(span)
	t.Logf("%d accepted in %v (virtual), %.1f %% of the allowed %.0f; %d refused", n, span, 100*ratio, allowed(span), s.Refused())
	if s.Refused() != 0 {
		t.Errorf("the stand-in refused %d requests", s.Refused())
	}
	if ratio < 0.95 {
		t.Errorf("throughput %.1f %% of what the limits allow, want at least 95 %%", 100*ratio)
	}
}

func TestXero(t *testing.T) {
	const n = 3 * 2 * profiles.XeroMinuteLimit // three minutes of two tenants
	s, _ := drive(t, profiles.Xero("xero-app:test"), func(now func() time.Time) standIn { return standin.NewXero(now) }, n,
		func(i int, url string) *http.Request {
			return request(url, "Xero-Tenant-Id", "tenant-"+strconv.Itoa(i%2))
		})
	check(t, s, func(span time.Duration) float64 {
		return float64(2 * rollingAllowed(profiles.XeroMinuteLimit, time.Minute, span))
	})
}

func TestGitHubREST(t *testing.T) {
	const n = 2 * profiles.GitHubHourLimit
	s, _ := driveOn(t, true, profiles.GitHubREST(), func(now func() time.Time) standIn { return standin.NewGitHub(now) }, n,
		func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer ghp_test") })
	check(t, s, func(span time.Duration) float64 {
		return float64(rollingAllowed(profiles.GitHubHourLimit, time.Hour, span))
	})
}

// TestGitHubRESTSharedToken: another client has used 4990 of the token's hour; the first
// answer's X-RateLimit-Remaining (9) raises the count, so the next 9 go and the rest wait for
// X-RateLimit-Reset: GitHub refuses none.
func TestGitHubRESTSharedToken(t *testing.T) {
	s, _ := drive(t, profiles.GitHubREST(), func(now func() time.Time) standIn {
		gh := standin.NewGitHub(now)
		gh.Use("Bearer ghp_test", 4990)
		return gh
	}, 40, func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer ghp_test") })
	if n, first, last := s.Accepted(); s.Refused() != 0 || n != 40 || last.Sub(first) < time.Hour-time.Second {
		t.Fatalf("%d accepted from %v to %v, %d refused; want 40, the 11th after the reset, none refused", n, first, last, s.Refused())
	}
}

func TestShopifyREST(t *testing.T) {
	const n = profiles.ShopifyRESTBucket + 2*60*profiles.ShopifyRESTLeakRate
	s, _ := drive(t, profiles.ShopifyREST(), func(now func() time.Time) standIn { return standin.NewShopifyREST(now) }, n,
		func(i int, url string) *http.Request { return request(url) })
	check(t, s, func(span time.Duration) float64 {
		return profiles.ShopifyRESTBucket + profiles.ShopifyRESTLeakRate*span.Seconds()
	})
}

// TestShopifyGraphQL: queries that request 100 points and cost 40, on a bucket of 1000
// restored at 50 a second: each is charged 100 and corrected to 40.
func TestShopifyGraphQL(t *testing.T) {
	const size, rate, requested, actual = 1000, 50, 100, 40
	estimate := func(req *http.Request) int {
		n, _ := strconv.Atoi(req.Header.Get("X-Standin-Requested-Cost"))
		return n
	}
	const n = 400
	s, _ := drive(t, profiles.ShopifyGraphQL(size, rate, estimate), func(now func() time.Time) standIn { return standin.NewShopifyGraphQL(now, size, rate) }, n,
		func(i int, url string) *http.Request {
			return request(url, "X-Standin-Requested-Cost", strconv.Itoa(requested), "X-Standin-Actual-Cost", strconv.Itoa(actual))
		})
	// A query runs while the bucket holds its requested cost: from full, (size − requested) /
	// actual + 1 at once, then one per actual/rate seconds.
	check(t, s, func(span time.Duration) float64 {
		return float64((size-requested)/actual+1) + span.Seconds()*rate/actual
	})
}

func TestHubSpot(t *testing.T) {
	const n = 3 * profiles.HubSpotTenSecondLimit
	s, _ := drive(t, profiles.HubSpot(), func(now func() time.Time) standIn { return standin.NewHubSpot(now) }, n,
		func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer pat-na1-test") })
	check(t, s, func(span time.Duration) float64 {
		return float64(rollingAllowed(profiles.HubSpotTenSecondLimit, 10*time.Second, span))
	})
}

func TestStripe(t *testing.T) {
	const n = 3 * profiles.StripeLiveLimit
	s, _ := drive(t, profiles.Stripe(), func(now func() time.Time) standIn { return standin.NewStripe(now) }, n,
		func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer sk_live_test") })
	check(t, s, func(span time.Duration) float64 {
		return float64(rollingAllowed(profiles.StripeLiveLimit, time.Second, span))
	})
}

// TestSlack: Tier 2 methods, two of them on one token: each method has its own 20 a minute.
func TestSlack(t *testing.T) {
	const perMinute = 20
	const n = 3 * 2 * perMinute
	s, _ := drive(t, profiles.Slack(2), func(now func() time.Time) standIn { return standin.NewSlack(now, perMinute) }, n,
		func(i int, url string) *http.Request {
			method := []string{"/api/conversations.list", "/api/users.list"}[i%2]
			return request(url+method, "Authorization", "Bearer xoxb-test")
		})
	check(t, s, func(span time.Duration) float64 { return float64(2 * rollingAllowed(perMinute, time.Minute, span)) })
}

// TestKeysHideTokens: the profiles keyed by a token never key by the token itself, and two
// tokens get two keys, each a keyed hash (after the API's prefix, for GitHub's).
func TestKeysHideTokens(t *testing.T) {
	for name, p := range map[string][]ratemonitor.Option{"GitHubREST": profiles.GitHubREST(), "HubSpot": profiles.HubSpot(),
		"Stripe": profiles.Stripe(), "Slack": profiles.Slack(3)} {
		tr, err := ratemonitor.New(nil, p...)
		if err != nil {
			t.Fatal(err)
		}
		a := tr.Key(request("https://api.example.test/x", "Authorization", "Bearer secret-token-a"))
		b := tr.Key(request("https://api.example.test/x", "Authorization", "Bearer secret-token-b"))
		tr.Close()
		if strings.Contains(a, "secret") || strings.Contains(b, "secret") || a == b || !strings.HasPrefix(strings.TrimPrefix(a, "github-rest:"), ratemonitor.HashedKeyPrefix) {
			t.Errorf("%s: keys %q and %q", name, a, b)
		}
	}
}

// TestProfileErrors: wrong arguments make New fail, naming the profile.
func TestProfileErrors(t *testing.T) {
	for _, c := range []struct {
		opts []ratemonitor.Option
		want string
	}{{profiles.Slack(5), "Slack(5)"}, {profiles.ShopifyGraphQL(0, 50, nil), "ShopifyGraphQL(0, 50)"}, {profiles.ShopifyGraphQL(1000, -1, nil), "ShopifyGraphQL(1000, -1)"}} {
		if _, err := ratemonitor.New(nil, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error naming %s", err, c.want)
		}
	}
}

// TestXeroConcurrent: ten goroutines share one tenant whose calls each take 2 ms at the
// stand-in, which refuses a sixth call in progress (X-Rate-Limit-Problem: concurrent). The
// profile's in-flight limit holds them to 5 in progress: no refusal of either kind, and the
// stand-in never sees more than 5 at once. Real time (50 calls, under the minute limit, so
// nothing waits for a rate slot; a virtual clock that jumps would expire the leases).
func TestXeroConcurrent(t *testing.T) {
	s := standin.NewXero(time.Now)
	s.Hold = 2 * time.Millisecond
	srv := httptest.NewServer(s)
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.Xero("xero-app:test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	const goroutines, each = 10, 5
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for range goroutines {
		wg.Go(func() {
			for range each {
				resp, err := c.Do(request(srv.URL, "Xero-Tenant-Id", "tenant-1"))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n, _, _ := s.Accepted()
	if n != goroutines*each || s.Refused() != 0 {
		t.Errorf("accepted %d, refused %d: want all %d accepted", n, s.Refused(), goroutines*each)
	}
	if m := s.MaxInFlight(); m > profiles.XeroInFlight {
		t.Errorf("the stand-in saw %d calls of the tenant in progress at once, want at most %d", m, profiles.XeroInFlight)
	}
	if got := tr.InFlight("tenant-1"); got != 0 {
		t.Errorf("InFlight after every body was closed = %d, want 0", got)
	}
}

// TestAppendToProfile: what the README says may be appended to a profile. A store and a key
// function are taken (the later WithKeyFunc wins); rules appended make New fail, saying so.
func TestAppendToProfile(t *testing.T) {
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tr, err := ratemonitor.New(http.DefaultTransport, append(profiles.GitHubREST(), ratemonitor.WithStore(mem),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "mine" }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if k := tr.Key(request("http://api.github.com/user", "Authorization", "Bearer x")); k != "mine" {
		t.Errorf("key %q after appending WithKeyFunc, want %q", k, "mine")
	}
	if tr.Store() != cache.Store(mem) {
		t.Error("the appended store is not the Transport's")
	}
	_, err = ratemonitor.New(http.DefaultTransport, append(profiles.GitHubREST(), ratemonitor.WithRules(strategy.Rule{Limit: 1, Window: time.Second}))...)
	if err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("rules appended to a profile: %v, want an error saying they are given twice", err)
	}
}

package profiles_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
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

// TestKeysHideTokens: the profiles keyed by a token never key by the token itself, and two
// tokens get two keys, each a keyed hash (after the API's prefix, for GitHub's).
func TestKeysHideTokens(t *testing.T) {
	for name, p := range map[string][]ratemonitor.Option{"GitHubREST": profiles.GitHubREST().Options(), "HubSpot": profiles.HubSpot().Options(),
		"Stripe": profiles.Stripe().Options(), "Slack": profiles.Slack(3).Options()} {
		t.Run(name, func(t *testing.T) {
			tr, err := ratemonitor.New(nil, p...)
			if err != nil {
				t.Fatal(err)
			}
			a := tr.Key(request("https://api.example.test/x", "Authorization", "Bearer secret-token-a"))
			b := tr.Key(request("https://api.example.test/x", "Authorization", "Bearer secret-token-b"))
			tr.Close()
			if strings.Contains(a, "secret") || strings.Contains(b, "secret") || a == b || !strings.HasPrefix(strings.TrimPrefix(a, "github-rest:"), "hmac:") {
				t.Errorf("%s: keys %q and %q", name, a, b)
			}
		})
	}
}

// TestProfileErrorsNameProfile: wrong arguments make New fail, naming the profile.
func TestProfileErrorsNameProfile(t *testing.T) {
	for _, c := range []struct {
		opts []ratemonitor.Option
		want string
	}{{profiles.Slack(5).Options(), "Slack(5)"}, {profiles.ShopifyGraphQL(0, 50, nil).Options(), "ShopifyGraphQL(0, 50)"}, {profiles.ShopifyGraphQL(1000, -1, nil).Options(), "ShopifyGraphQL(1000, -1)"}} {
		t.Run(c.want, func(t *testing.T) {
			if _, err := ratemonitor.New(nil, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want an error naming %s", err, c.want)
			}
		})
	}
}

// TestAppendToProfileKeepsStoreAndKeyFunc: what the README says may be appended to a profile. A
// store and a key function are taken (the later WithKeyFunc wins); rules appended make New fail,
// saying so.
func TestAppendToProfileKeepsStoreAndKeyFunc(t *testing.T) {
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tr, err := ratemonitor.New(http.DefaultTransport, append(profiles.GitHubREST().Options(), ratemonitor.WithStore(mem),
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
	_, err = ratemonitor.New(http.DefaultTransport, append(profiles.GitHubREST().Options(), ratemonitor.WithRules(strategy.Rule{Limit: 1, Window: time.Second}))...)
	if err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("rules appended to a profile: %v, want an error saying they are given twice", err)
	}
}

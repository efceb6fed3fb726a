package profiles_test

// Regression tests from the adversarial review of issue 15 item 3 (profiles): each failed on
// main at 6db666f (TestXeroHoldsFiveInFlightAtXero on an earlier main), and asserts the fixed
// behaviour.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// barrier is an upstream that holds each request until n have arrived (or 1 s has passed),
// so that how many the Transport lets out at once is counted exactly, without timing luck.
type barrier struct {
	n        int
	mu       sync.Mutex
	inFlight int
	maxIn    int
	arrived  int
	all      chan struct{}
	answer   func(i int, w http.ResponseWriter)
}

func newBarrier(n int, answer func(i int, w http.ResponseWriter)) *barrier {
	return &barrier{n: n, all: make(chan struct{}), answer: answer}
}

func (b *barrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.inFlight++
	b.maxIn = max(b.maxIn, b.inFlight)
	b.arrived++
	i := b.arrived
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(time.Second):
	}
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	b.answer(i, w)
}

// fire sends n requests at once through tr, and returns their statuses.
func fire(t *testing.T, tr http.RoundTripper, n int, mk func() *http.Request) []int {
	return fireOr(t, tr, n, mk, false)
}

// fireOr is fire; with waitErrs, a request the Transport does not send before its 3 s
// deadline (it would wait too long) has status 0 instead of failing the test.
func fireOr(t *testing.T, tr http.RoundTripper, n int, mk func() *http.Request, waitErrs bool) []int {
	t.Helper()
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			resp, err := tr.RoundTrip(mk().WithContext(ctx))
			if err != nil {
				if !waitErrs || !strings.Contains(err.Error(), "past the context's deadline") {
					t.Error(err)
				}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	return statuses
}

// TestXeroHoldsFiveInFlightAtXero: ten goroutines on one tenant: at most profiles.XeroInFlight
// calls are in progress at Xero at once.
func TestXeroHoldsFiveInFlightAtXero(t *testing.T) {
	up := newBarrier(10, func(_ int, w http.ResponseWriter) { w.Write([]byte(`{}`)) })
	srv := httptest.NewServer(up)
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.Xero("xero-app:test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	fire(t, tr, 10, func() *http.Request { return request(srv.URL, "Xero-Tenant-Id", "tenant-1") })
	if up.maxIn > profiles.XeroInFlight {
		t.Errorf("%d calls of one tenant were in progress at Xero at once, want at most %d", up.maxIn, profiles.XeroInFlight)
	}
}

// TestGitHubUnauthenticatedHeldTo60: 100 unauthenticated requests at once: 60 are sent (83 points
// each of the 5000 an hour), GitHub refuses none (it allows 60 an hour: "The primary rate limit
// for unauthenticated requests is 60 requests per hour"; review M1, rev3 finding 5).
func TestGitHubUnauthenticatedHeldTo60(t *testing.T) {
	reset := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	up := newBarrier(100, func(i int, w http.ResponseWriter) {
		h := w.Header()
		h.Set("x-ratelimit-limit", "60")
		h.Set("x-ratelimit-remaining", strconv.Itoa(max(0, 60-i)))
		h.Set("x-ratelimit-reset", reset)
		h.Set("x-ratelimit-resource", "core")
		if i > 60 {
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"message":"API rate limit exceeded for 127.0.0.1."}`))
			return
		}
		w.Write([]byte(`{}`))
	})
	srv := httptest.NewServer(up)
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.GitHubREST()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	refused, sent := 0, 0
	for _, s := range fireOr(t, tr, 100, func() *http.Request { return request(srv.URL) }, true) {
		if s == http.StatusForbidden {
			refused++
		}
		if s != 0 {
			sent++
		}
	}
	if refused != 0 || sent != 60 {
		t.Errorf("GitHub refused %d of 100 unauthenticated requests sent at once, %d sent; want none refused, 60 sent (83 points each of 5000: GitHub allows 60 an hour)", refused, sent)
	}
}

// ghRequest sends one request to an upstream that answers with status and header fields.
func ghOnce(t *testing.T, tr *ratemonitor.Transport, status int, body string, fields ...string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(fields); i += 2 {
			w.Header().Set(fields[i], fields[i+1])
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	resp, err := tr.RoundTrip(request(srv.URL, "Authorization", "Bearer ghp_test"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func ghWait(t *testing.T, tr *ratemonitor.Transport) time.Duration {
	t.Helper()
	key := tr.Key(request("http://api.github.test/", "Authorization", "Bearer ghp_test"))
	w, err := tr.WaitTime(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestGitHubSecondaryMessage403PausesAMinute: a 403 whose only sign of a secondary rate limit is
// its JSON message pauses the token at least a minute (GitHub: "wait for at least one minute";
// review M2).
func TestGitHubSecondaryMessage403PausesAMinute(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.GitHubREST(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ghOnce(t, tr, http.StatusForbidden,
		`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`,
		"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "4990", "x-ratelimit-used", "10",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(time.Hour).Unix(), 10), "x-ratelimit-resource", "core")
	if w := ghWait(t, tr); w < time.Minute {
		t.Errorf("after a secondary-limit 403 without retry-after, the token may send again in %v, want at least 1m0s", w)
	}
}

// TestGitHubOtherResourceNotRead: a search response with the search resource used up
// (x-ratelimit-resource: search) does not hold core requests of the token (review M3).
func TestGitHubOtherResourceNotRead(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.GitHubREST(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ghOnce(t, tr, http.StatusOK, `{"total_count":0,"items":[]}`,
		"x-ratelimit-limit", "30", "x-ratelimit-remaining", "0", "x-ratelimit-used", "30",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(time.Minute).Unix(), 10), "x-ratelimit-resource", "search")
	if w := ghWait(t, tr); w != 0 {
		t.Errorf("after a search response with the search resource used up, a core request of the token waits %v, want 0 (core has 4999 left)", w)
	}
}

// TestGitHubRESTAndGraphQLCountApart: over one store, the REST limit used up does not hold GraphQL
// queries of the token: their keys differ (review M4).
func TestGitHubRESTAndGraphQLCountApart(t *testing.T) {
	clk := clock.NewManual(t0)
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rest, err := ratemonitor.New(nil, append(profiles.GitHubREST(), ratemonitor.WithStore(store))...)
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	gql, err := ratemonitor.New(nil, append(profiles.GitHubGraphQL(nil), ratemonitor.WithStore(store))...)
	if err != nil {
		t.Fatal(err)
	}
	defer gql.Close()
	ghOnce(t, rest, http.StatusOK, `{}`,
		"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "0", "x-ratelimit-used", "5000",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(30*time.Minute).Unix(), 10), "x-ratelimit-resource", "core")
	if w := ghWait(t, gql); w != 0 {
		t.Errorf("the REST limit used up makes a GraphQL query of the token wait %v, want 0 (GraphQL points are a separate limit)", w)
	}
}

// TestShopifySmallerBucketFullWaits: after X-Shopify-Shop-Api-Call-Limit: 10/10 (a bucket smaller
// than the rule's 40, full) the next request waits (review L1).
func TestShopifySmallerBucketFullWaits(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.ShopifyREST(), ratemonitor.WithClock(clk))...)
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

// TestGitHubFarResetCutToAnHour: a reset 10 days away (garbled) holds the token at most an hour
// and a minute (review L2).
func TestGitHubFarResetCutToAnHour(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.GitHubREST(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ghOnce(t, tr, http.StatusForbidden, `{"message":"API rate limit exceeded"}`,
		"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "0",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(10*24*time.Hour).Unix(), 10), "x-ratelimit-resource", "core")
	if w := ghWait(t, tr); w > time.Hour+time.Minute {
		t.Errorf("a reset 10 days away pauses the token %v, want at most GitHub's hour", w)
	}
}

// TestShopifyAbsurdCostNotRecorded: an actualQueryCost of 2e9 (more than the bucket) is not
// recorded: the shop waits at most the bucket's 20 s (review M6).
func TestShopifyAbsurdCostNotRecorded(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.ShopifyGraphQL(1000, 50, nil), ratemonitor.WithClock(clk))...)
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

// TestXeroConcurrent429PausesASecond: Xero's concurrent-limit 429 (no Retry-After) pauses the
// tenant a few seconds at most, not a minute (review M9).
func TestXeroConcurrent429PausesASecond(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.Xero("xero-app:test"), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Rate-Limit-Problem", "concurrent")
		w.Header().Set("X-MinLimit-Remaining", "50")
		w.Header().Set("X-DayLimit-Remaining", "4900")
		w.Header().Set("X-AppMinLimit-Remaining", "9000")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	req := request(srv.URL, "Xero-Tenant-Id", "tenant-1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	w, err := tr.WaitTime(context.Background(), tr.Key(req), 1)
	if err != nil || w > 5*time.Second {
		t.Errorf("after Xero's concurrent-limit 429 the tenant waits %v (%v), want a few seconds at most", w, err)
	}
}

// TestXeroEmptyAppKeyNamesProfile: Xero("") makes New fail with an error naming Xero("") (review
// L6).
func TestXeroEmptyAppKeyNamesProfile(t *testing.T) {
	tr, err := ratemonitor.New(nil, profiles.Xero("")...)
	if err == nil {
		tr.Close()
		t.Fatal("New accepted Xero(\"\")")
	}
	if !strings.Contains(err.Error(), "Xero(") {
		t.Errorf("New: %v, want an error naming Xero(\"\")", err)
	}
}

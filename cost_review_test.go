package ratemonitor_test

// Regression tests from the adversarial review of issue 15 items 2 and 4 (request cost, sync
// gaps): each failed on main at 6db666f, and asserts the fixed behaviour.

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/costcheck"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestCostReportReturnsAtHeader: with WithCostReport, RoundTrip returns when the response's header
// has arrived, while the upstream is still streaming the JSON body (review H1: it waited for the
// whole body).
func TestCostReportReturnsAtHeader(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":`))
		w.(http.Flusher).Flush()
		<-release // the rest of the body comes later
		w.Write([]byte(`{"rateLimit":{"cost":1,"remaining":4999,"limit":5000}}}`))
	}))
	defer srv.Close()
	defer close(release)
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}),
		ratemonitor.WithCostReport(cost.GitHubGraphQL(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp != nil {
			resp.Body.Close()
		}
	case <-time.After(time.Second):
		t.Errorf("RoundTrip had not returned 1 s after the response's header arrived: it waits for the whole body")
		release <- struct{}{}
		if resp := <-done; resp != nil {
			resp.Body.Close()
		}
	}
}

// TestCostReportLeavesSwitchingProtocolsBody: a 101 response (a WebSocket upgrade) is returned at
// once, its body still the io.ReadWriteCloser net/http gives (review H1).
func TestCostReportLeavesSwitchingProtocolsBody(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}),
		ratemonitor.WithCostReport(cost.GitHubGraphQL(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		resp, _ := tr.RoundTrip(req)
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp == nil {
			t.Fatal("no response")
		}
		defer resp.Body.Close()
		if _, ok := resp.Body.(io.ReadWriteCloser); !ok {
			t.Errorf("the 101 response's body is a %T, not the io.ReadWriteCloser net/http returns", resp.Body)
		}
	case <-time.After(time.Second):
		t.Errorf("RoundTrip of a 101 had not returned after 1 s: the cost reader reads the upgraded connection")
		release <- struct{}{}
		if resp := <-done; resp != nil {
			resp.Body.Close()
		}
	}
}

// shopifyCostBody is a Shopify GraphQL answer of the given data size whose actual cost is
// actual, on a bucket of 1000.
func shopifyCostBody(dataBytes, actual int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"data":{"blob":"%s"},"extensions":{"cost":{"requestedQueryCost":%d,"actualQueryCost":%d,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":%d,"restoreRate":50.0}}}}`,
		strings.Repeat("x", dataBytes), actual, actual, 1000-actual)
	return b.Bytes()
}

// shopifyUsed sends one query (charged 1: the estimate) to an upstream answering body,
// gzip'd when gz, and returns the bucket's usage after the correction.
func shopifyUsed(t *testing.T, body []byte, gz bool) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if gz {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write(body)
			zw.Close()
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	rule, err := tokenbucket.Rule(1000, 50)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tokenbucket.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(srv.Client().Transport, ratemonitor.WithStrategy(s), ratemonitor.WithPacing(),
		ratemonitor.WithClock(clk), ratemonitor.WithKeyFunc(func(*http.Request) string { return "shop" }),
		ratemonitor.WithCost(func(*http.Request) int { return 1 }),
		ratemonitor.WithCostReport(cost.ShopifyGraphQL(rule.Window)))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip") // as a client that decompresses itself does
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	u, err := tr.AllocationUsed(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	return u[0].Used
}

// TestShopifyCostCorrectedPastMaxBodyAndGzip: a query charged 1 that Shopify says cost 50 is
// corrected to 50 for a small body, a body over cost.MaxBody (extensions read from its tail) and a
// gzip'd body (review M5).
func TestShopifyCostCorrectedPastMaxBodyAndGzip(t *testing.T) {
	if got := shopifyUsed(t, shopifyCostBody(100, 50), false); got != 50 {
		t.Fatalf("small plain body: used %d, want 50 (the control case)", got)
	}
	if got := shopifyUsed(t, shopifyCostBody(cost.MaxBody+1, 50), false); got != 50 {
		t.Errorf("body over cost.MaxBody: used %d after a query Shopify says cost 50, want 50", got)
	}
	if got := shopifyUsed(t, shopifyCostBody(100, 50), true); got != 50 {
		t.Errorf("gzip'd body: used %d after a query Shopify says cost 50, want 50", got)
	}
}

// TestCostErrorHidesCredential: with KeyByHeader("Authorization", nil) the WithCost refusal names
// the hashed key, not the bearer token (review M10).
func TestCostErrorHidesCredential(t *testing.T) {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)),
		ratemonitor.WithCost(func(*http.Request) int { return 11 }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	req.Header.Set("Authorization", "Bearer ghp_SECRETTOKEN")
	_, err = tr.RoundTrip(req)
	if err == nil || strings.Contains(err.Error(), "SECRETTOKEN") {
		t.Errorf("RoundTrip: %v (the credential is in the error)", err)
	}
}

// TestXRateLimitWindowBesideReadersRefused: SyncConfig.XRateLimitWindow beside Readers makes New
// fail (it was silently ignored; review L3).
func TestXRateLimitWindowBesideReadersRefused(t *testing.T) {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithSync(ratemonitor.SyncConfig{Readers: []headers.Reader{headers.IETFReader}, XRateLimitWindow: time.Hour}))
	if err == nil {
		tr.Close()
		t.Errorf("New accepted XRateLimitWindow 1h0m0s beside Readers, and will never read X-RateLimit-* (nor has a 1h rule)")
	}
}

// TestCostFuncPanicIsError: a cost function that panics makes RoundTrip return an error, not panic
// (review L5).
func TestCostFuncPanicIsError(t *testing.T) {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithCost(func(req *http.Request) int { return len(req.Header["X"][0]) })) // no X: index out of range
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("RoundTrip panicked: %v", p)
		}
	}()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	tr.RoundTrip(req)
}

// TestSyncLogHidesQueryToken: WithSync's warnings do not log a credential in the query string
// (review M10).
func TestSyncLogHidesQueryToken(t *testing.T) {
	var buf syncBuffer
	now := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", now.Add(-time.Hour).UTC().Format(http.TimeFormat)) // a skewed Date
		w.Header().Set("Retry-After", now.Add(-time.Hour+30*time.Second).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}),
		ratemonitor.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/conversations.list?token=xoxb-SECRETTOKEN", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if out := buf.String(); out == "" || strings.Contains(out, "SECRETTOKEN") {
		t.Errorf("the log has the credential (or nothing was logged): %s", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTokenBucketNoGiveBackAfterRefill: see costcheck.TokenBucketGiveBack (memory store, virtual
// time: a bucket refilled 1 a second, a mutation of 11 s): used stays 10, nothing given back
// (review H2). The Redis store's case is in the Redis module's transporttest.
func TestTokenBucketNoGiveBackAfterRefill(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	if u := costcheck.TokenBucketGiveBack(t, 1, func() { clk.Advance(11 * time.Second) }, ratemonitor.WithClock(clk)); u != 10 {
		t.Errorf("used %d after the give-back, want 10 (the upstream's bucket is empty)", u)
	}
}

// TestReservationSlotCostCorrectedUp: a request sent on a Reservation's slot (one slot charged)
// that the upstream says cost 10 leaves 10 used: the rest is recorded on top (review M7).
func TestReservationSlotCostCorrectedUp(t *testing.T) {
	var hits atomic.Int64
	up := upstreamtest.Cost(t, "10", &hits)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(up.Client().Transport, ratemonitor.WithClock(clk), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		ratemonitor.WithCost(func(*http.Request) int { return 10 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	r, err := tr.Reserve(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, up.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u := used(t, tr, "k"); u != 10 {
		t.Errorf("used %d after a request the upstream says cost 10, want 10", u)
	}
}

// TestStackedInnerCorrectsOuterCharge: an inner Transport with WithCost and WithCostReport under
// an outer one without them, on one store and the same counters: the outer's charge (1) is
// corrected up by the inner to the reported 10 (review M8).
func TestStackedInnerCorrectsOuterCharge(t *testing.T) {
	var hits atomic.Int64
	up := upstreamtest.Cost(t, "10", &hits)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	common := []ratemonitor.Option{ratemonitor.WithStore(store), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" })}
	inner, err := ratemonitor.New(up.Client().Transport, append(common,
		ratemonitor.WithCost(func(*http.Request) int { return 10 }), ratemonitor.WithCostReport(upstreamtest.HeaderCost))...)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	outer, err := ratemonitor.New(inner, common...)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	if err := upstreamtest.SendWithin(outer, up.URL, time.Second); err != nil {
		t.Fatal(err)
	}
	if u := used(t, outer, "k"); u != 10 {
		t.Errorf("stacked, cost on the inner Transport: used %d after a request of cost 10, want 10", u)
	}
}

// TestXeroReaderWithoutAppRulesAccepted: headers.XeroReader is accepted without app rules, its app
// figure being optional (review L4).
func TestXeroReaderWithoutAppRulesAccepted(t *testing.T) {
	tr, err := ratemonitor.New(nil,
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 5000, Window: 24 * time.Hour}),
		ratemonitor.WithSync(ratemonitor.SyncConfig{Readers: []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour)}}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tr.Close()
}

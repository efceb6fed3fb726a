package profiles_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// The examples run on a virtual clock (a paced wait moves it instead of sleeping) against
// local upstreams that answer with the API's own header fields; a real program passes
// http.DefaultTransport and leaves out WithClock.

// GitHub's answers raise the token's count to what GitHub has counted (another client of
// the token used 9 this hour); a 403 for a secondary limit with Retry-After pauses the token.
func ExampleGitHubREST() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := int(calls.Add(1))
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(5000-9-n))
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(clk.Now().Add(40*time.Minute).Unix(), 10))
		w.Header().Set("X-RateLimit-Resource", "core")
		if n == 2 {
			w.Header().Set("Retry-After", "60")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"message":"You have exceeded a secondary rate limit."}`)
		}
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.GitHubREST().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()

	client := &http.Client{Transport: tr}
	send := func(req *http.Request) int { // the status; the body read to its end and closed
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	printStatus := func(key string) { // the key's usage per rule and its wait
		st, err := tr.Status(context.Background(), key)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, u := range st.Rules {
			fmt.Printf("  %v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
		}
		fmt.Println("  wait:", st.Wait)
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/repos/golang/go", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Authorization", "Bearer ghp_example")
	key := tr.Key(req) // a keyed hash of the token, never the token
	fmt.Println("key:", key)
	fmt.Println("first:", send(req))
	printStatus(key)
	fmt.Println("second:", send(req.Clone(context.Background())))
	printStatus(key)
	// Output:
	// key: github-rest:hmac:43a38baf36ee2a499a83cfe4fb6e5a6b
	// first: 200
	//   5000/1h0m0s (margin 1s): 10 used, 4990 remaining
	//   wait: 0s
	// second: 403
	//   5000/1h0m0s (margin 1s): 11 used, 4989 remaining
	//   wait: 1m0s
}

// A GraphQL query is charged its estimate, then the cost GitHub reports in rateLimit.
func ExampleGitHubGraphQL() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-RateLimit-Resource", "graphql")
		io.WriteString(w, `{"data":{"viewer":{"login":"octocat"},"rateLimit":{"cost":3,"remaining":4997,"limit":5000,"resetAt":"`+
			clk.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}}}`)
	}))
	defer srv.Close()
	estimate := func(*http.Request) int { return 10 } // what the caller expects a query to cost
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.GitHubGraphQL(estimate).Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/graphql", strings.NewReader(`{"query":"{ viewer { login } rateLimit { cost remaining limit resetAt } }"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Authorization", "Bearer ghp_example")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body) // the body read to its end: the cost is known
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	st, err := tr.Status(context.Background(), tr.Key(req))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range st.Rules {
		fmt.Printf("  %v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
	}
	fmt.Println("  wait:", st.Wait)
	// Output:
	// 200
	//   5000/1h0m0s (margin 1s): 3 used, 4997 remaining
	//   wait: 0s
}

// Shopify's X-Shopify-Shop-Api-Call-Limit says the bucket's level: here 30 of 40 (other
// apps' calls count in another bucket; this app's other processes count in this one).
func ExampleShopifyREST() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Shopify-Shop-Api-Call-Limit", "30/40")
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.ShopifyREST().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/admin/api/2025-01/products.json", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "key:", tr.Key(req) == req.URL.Host)
	st, err := tr.Status(context.Background(), tr.Key(req))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range st.Rules {
		fmt.Printf("  %v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
	}
	fmt.Println("  wait:", st.Wait)
	// Output:
	// 200 key: true
	//   40/20s (margin 500ms): 30 used, 10 remaining
	//   wait: 0s
}

// Shopify GraphQL: each query is charged the estimate (here its requested cost, computed by
// the caller) and corrected to the actualQueryCost Shopify reports; the difference is given back.
func ExampleShopifyGraphQL() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":{"shop":{"name":"example"}},"extensions":{"cost":{"requestedQueryCost":50,"actualQueryCost":12,`+
			`"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":988.0,"restoreRate":100.0}}}}`)
	}))
	defer srv.Close()
	estimate := func(req *http.Request) int { n, _ := strconv.Atoi(req.Header.Get("X-Query-Cost")); return max(n, 1) }
	tr, err := ratemonitor.New(srv.Client().Transport,
		append(profiles.ShopifyGraphQL(1000, 100, estimate).Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/admin/api/2025-01/graphql.json", strings.NewReader(`{"query":"{ shop { name } }"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("X-Query-Cost", "50")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body) // the body read to its end: the cost is known
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	st, err := tr.Status(context.Background(), tr.Key(req))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range st.Rules {
		fmt.Printf("  %v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
	}
	fmt.Println("  wait:", st.Wait)
	// Output:
	// 200
	//   1000/10s: 12 used, 988 remaining
	//   wait: 0s
}

// HubSpot's fields give the 10 s interval's and the day's remaining counts.
func ExampleHubSpot() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-HubSpot-RateLimit-Max", "100")
		w.Header().Set("X-HubSpot-RateLimit-Remaining", "90")
		w.Header().Set("X-HubSpot-RateLimit-Interval-Milliseconds", "10000")
		w.Header().Set("X-HubSpot-RateLimit-Daily", "250000")
		w.Header().Set("X-HubSpot-RateLimit-Daily-Remaining", "249000")
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.HubSpot().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/crm/v3/objects/contacts", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Authorization", "Bearer pat-na1-example")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	st, err := tr.Status(context.Background(), tr.Key(req))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range st.Rules {
		fmt.Printf("  %v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
	}
	fmt.Println("  wait:", st.Wait)
	// Output:
	// 200
	//   100/10s (granularity 100ms, margin 200ms): 10 used, 90 remaining
	//   250000/24h0m0s (margin 1m0s): 1000 used, 249000 remaining
	//   wait: 0s
}

// Stripe sends no rate-limit fields: a 429 without Retry-After pauses the key for a second.
func ExampleStripe() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.Stripe().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	send := func(req *http.Request) int { // the status; the body read to its end and closed
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	printStatus := func(key string) { // the key's usage per rule and its wait
		st, err := tr.Status(context.Background(), key)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, u := range st.Rules {
			fmt.Printf("  %v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
		}
		fmt.Println("  wait:", st.Wait)
	}
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/charges", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Authorization", "Bearer sk_live_example")
	start := clk.Now()
	fmt.Println(send(req), "at +"+clk.Now().Sub(start).String())
	fmt.Println(send(req.Clone(context.Background())), "at +"+clk.Now().Sub(start).String()) // paced: after the pause
	printStatus(tr.Key(req))
	// Output:
	// 429 at +0s
	// 200 at +1s
	//   100/1s (granularity 10ms, margin 20ms): 2 used, 98 remaining
	//   wait: 0s
}

// Slack counts per method and token: a 429 with Retry-After pauses that method only.
func ExampleSlack() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/conversations.history" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.Slack(3).Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	send := func(req *http.Request) int { // the status; the body read to its end and closed
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	printStatus := func(key string) { // the key's usage per rule and its wait
		st, err := tr.Status(context.Background(), key)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, u := range st.Rules {
			fmt.Printf("  %v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
		}
		fmt.Println("  wait:", st.Wait)
	}
	history, err := http.NewRequest(http.MethodGet, srv.URL+"/api/conversations.history", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	history.Header.Set("Authorization", "Bearer xoxb-example")
	users, err := http.NewRequest(http.MethodGet, srv.URL+"/api/users.list", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	users.Header.Set("Authorization", "Bearer xoxb-example")
	fmt.Println("conversations.history:", send(history))
	fmt.Println("users.list:", send(users))
	fmt.Println("conversations.history:")
	printStatus(tr.Key(history))
	fmt.Println("users.list:")
	printStatus(tr.Key(users))
	// Output:
	// conversations.history: 429
	// users.list: 200
	// conversations.history:
	//   50/1m0s (margin 1s): 1 used, 49 remaining
	//   wait: 30s
	// users.list:
	//   50/1m0s (margin 1s): 1 used, 49 remaining
	//   wait: 0s
}

package headers_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
)

// XeroReader ties Xero's remaining counts to the rules of the given windows: the tenant's
// minute and day, and the app's minute.
func ExampleXeroReader() {
	r := headers.XeroReader(time.Minute, 24*time.Hour)
	fmt.Println(r)
	h := http.Header{}
	h.Set("X-MinLimit-Remaining", "42")
	h.Set("X-DayLimit-Remaining", "4870")
	h.Set("X-AppMinLimit-Remaining", "9500")
	rep := r.Read(h, time.Now())
	for _, sig := range rep.Signals { // Limit and Reset are headers.Unknown (-1) where unsaid
		fmt.Printf("%+v\n", sig)
	}
	// Output:
	// headers.XeroReader(1m0s, 24h0m0s) (windows 1m0s, 24h0m0s, 1m0s (app, optional))
	// {App:false Window:1m0s Remaining:42 Limit:-1 Reset:-1ns}
	// {App:false Window:24h0m0s Remaining:4870 Limit:-1 Reset:-1ns}
	// {App:true Window:1m0s Remaining:9500 Limit:-1 Reset:-1ns}
}

// A Xero 429 names the limit it refused for; that rule is used up until Retry-After.
func ExampleXeroReader_refused() {
	r := headers.XeroReader(time.Minute, 24*time.Hour)
	h := http.Header{}
	h.Set("Retry-After", "25")
	h.Set("X-Rate-Limit-Problem", "appminute")
	h.Set("X-MinLimit-Remaining", "30")
	h.Set("X-AppMinLimit-Remaining", "0")
	rep := r.Read(h, time.Now())
	for _, sig := range rep.Signals { // Limit and Reset are headers.Unknown (-1) where unsaid
		fmt.Printf("%+v\n", sig)
	}
	fmt.Println("refused for the app-wide limit:", rep.App)
	// Output:
	// {App:false Window:1m0s Remaining:30 Limit:-1 Reset:-1ns}
	// {App:true Window:1m0s Remaining:0 Limit:-1 Reset:25s}
	// refused for the app-wide limit: true
}

// IETFReader reads the IETF RateLimit-Policy and RateLimit fields, which carry their own
// windows (w, in seconds): each policy's figure is about the rule of that window.
func Example_ietfReader() {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=5000;w=86400`)
	h.Set("RateLimit", `"burst";r=40;t=12, "daily";r=4000;t=36000`)
	rep := headers.IETFReader.Read(h, time.Now())
	for _, sig := range rep.Signals { // Limit and Reset are headers.Unknown (-1) where unsaid
		fmt.Printf("%+v\n", sig)
	}
	// Output:
	// {App:false Window:1m0s Remaining:40 Limit:100 Reset:12s}
	// {App:false Window:24h0m0s Remaining:4000 Limit:5000 Reset:10h0m0s}
}

// ParseIETF pairs the RateLimit-Policy and RateLimit members by name.
func ExampleParseIETF() {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"default";q=100;w=60`)
	h.Set("RateLimit", `"default";r=40;t=12`)
	for _, p := range headers.ParseIETF(h) {
		fmt.Printf("%s: %d of %d per %v left, reset in %v\n", p.Name, p.Remaining, p.Quota, p.Window, p.Reset)
	}
	// Output: default: 40 of 100 per 1m0s left, reset in 12s
}

// The X-RateLimit-* fields do not say their window: the reader is given it (GitHub's is an
// hour, and its reset is in epoch seconds).
func ExampleXRateLimitReader() {
	now := time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC) // when the response arrived
	r := headers.XRateLimitReader(time.Hour, headers.ResetEpoch)
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "5000")
	h.Set("X-RateLimit-Remaining", "4321")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(20*time.Minute).Unix(), 10))
	rep := r.Read(h, now)
	for _, sig := range rep.Signals { // Limit and Reset are headers.Unknown (-1) where unsaid
		fmt.Printf("%+v\n", sig)
	}
	// Output:
	// {App:false Window:1h0m0s Remaining:4321 Limit:5000 Reset:20m0s}
}

// Retry-After is seconds or an HTTP-date; what cannot be read is not OK.
func ExampleRetryAfter() {
	now := time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC) // when the response arrived
	for _, v := range []string{"120", now.Add(90 * time.Second).Format(http.TimeFormat), "1.5", ""} {
		wait, ok := headers.RetryAfter(http.Header{"Retry-After": {v}}, now)
		fmt.Printf("%q: %v %v\n", v, wait, ok)
	}
	// Output:
	// "120": 2m0s true
	// "Fri, 15 Jan 2027 12:01:30 GMT": 1m30s true
	// "1.5": 0s false
	// "": 0s false
}

// Shopify's "used/size" field says the bucket's level: the free room is what remains.
func ExampleShopifyReader() {
	h := http.Header{}
	h.Set("X-Shopify-Shop-Api-Call-Limit", "32/40")
	rep := headers.ShopifyReader(20*time.Second).Read(h, time.Now())
	for _, sig := range rep.Signals { // Limit and Reset are headers.Unknown (-1) where unsaid
		fmt.Printf("%+v\n", sig)
	}
	// Output:
	// {App:false Window:20s Remaining:8 Limit:40 Reset:-1ns}
}

// HubSpot's fields give the 10 s interval's and the day's figures.
func ExampleHubSpotReader() {
	h := http.Header{}
	h.Set("X-HubSpot-RateLimit-Max", "100")
	h.Set("X-HubSpot-RateLimit-Remaining", "97")
	h.Set("X-HubSpot-RateLimit-Interval-Milliseconds", "10000")
	h.Set("X-HubSpot-RateLimit-Daily", "250000")
	h.Set("X-HubSpot-RateLimit-Daily-Remaining", "249000")
	rep := headers.HubSpotReader(10*time.Second, 24*time.Hour).Read(h, time.Now())
	for _, sig := range rep.Signals { // Limit and Reset are headers.Unknown (-1) where unsaid
		fmt.Printf("%+v\n", sig)
	}
	// Output:
	// {App:false Window:10s Remaining:97 Limit:100 Reset:-1ns}
	// {App:false Window:24h0m0s Remaining:249000 Limit:250000 Reset:-1ns}
}

// Refused tells a rate-limit refusal from a permission error: every 429, and a 403 that says
// it is about a limit the way GitHub does.
func ExampleRefused() {
	fmt.Println(headers.Refused(http.StatusTooManyRequests, http.Header{}))
	fmt.Println(headers.Refused(http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"0"}})) // keys in canonical form
	fmt.Println(headers.Refused(http.StatusForbidden, http.Header{"Retry-After": {"60"}}))
	fmt.Println(headers.Refused(http.StatusForbidden, http.Header{"X-Ratelimit-Remaining": {"4999"}}))
	// Output:
	// true
	// true
	// true
	// false
}

// A 403 for GitHub's secondary limit may say so only in its body; GitHubSecondary reads the
// start of it and puts it back whole.
func ExampleGitHubSecondary() {
	body := `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",` +
		`"documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`
	resp := &http.Response{StatusCode: http.StatusForbidden,
		Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}, "X-Ratelimit-Remaining": {"4990"}},
		Body:   io.NopCloser(strings.NewReader(body))}
	fmt.Println(headers.Refused(resp.StatusCode, resp.Header), headers.GitHubSecondary(resp))
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(b) == len(body))

	perm := &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"message":"Resource not accessible by integration"}`))}
	fmt.Println(headers.GitHubSecondary(perm))
	// Output:
	// false true
	// true
	// false
}

// Declare makes a reader of an upstream's own fields, with the windows it is about, so that
// ratemonitor.New refuses it unless a rule has that window.
func ExampleDeclare() {
	r := headers.Declare("acme", func(h http.Header, _ time.Time) headers.Report {
		left, err := strconv.Atoi(h.Get("Acme-Calls-Left"))
		if err != nil {
			return headers.Report{}
		}
		return headers.Report{Signals: []headers.Signal{{Window: time.Hour, Remaining: left, Limit: headers.Unknown, Reset: headers.Unknown}}}
	}, headers.Window{Window: time.Hour})
	fmt.Println(r)
	rep := r.Read(http.Header{"Acme-Calls-Left": {"250"}}, time.Now())
	for _, sig := range rep.Signals { // Limit and Reset are headers.Unknown (-1) where unsaid
		fmt.Printf("%+v\n", sig)
	}
	// Output:
	// acme (windows 1h0m0s)
	// {App:false Window:1h0m0s Remaining:250 Limit:-1 Reset:-1ns}
}

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

// The instant the examples' responses arrive at.
var now = time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC)

// header builds an http.Header from name, value pairs, as a response would carry them.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// printReport prints what a reader learned: one line per rule it has a figure for.
func printReport(rep headers.Report) {
	for _, s := range rep.Signals {
		who := "key"
		if s.App {
			who = "app"
		}
		limit, reset := "unknown", "unknown"
		if s.Limit != headers.Unknown {
			limit = strconv.Itoa(s.Limit)
		}
		if s.Reset != headers.Unknown {
			reset = s.Reset.String()
		}
		fmt.Printf("%s %v rule: %d remaining, limit %s, reset %s\n", who, s.Window, s.Remaining, limit, reset)
	}
	if rep.App {
		fmt.Println("refused for the app-wide limit")
	}
}

// XeroReader ties Xero's remaining counts to the rules of the given windows: the tenant's
// minute and day, and the app's minute.
func ExampleXeroReader() {
	r := headers.XeroReader(time.Minute, 24*time.Hour)
	fmt.Println(r)
	printReport(r.Read(header(
		"X-MinLimit-Remaining", "42",
		"X-DayLimit-Remaining", "4870",
		"X-AppMinLimit-Remaining", "9500"), now))
	// Output:
	// headers.XeroReader(1m0s, 24h0m0s) (windows 1m0s, 24h0m0s, 1m0s (app, optional))
	// key 1m0s rule: 42 remaining, limit unknown, reset unknown
	// key 24h0m0s rule: 4870 remaining, limit unknown, reset unknown
	// app 1m0s rule: 9500 remaining, limit unknown, reset unknown
}

// A Xero 429 names the limit it refused for; that rule is used up until Retry-After.
func ExampleXeroReader_refused() {
	r := headers.XeroReader(time.Minute, 24*time.Hour)
	printReport(r.Read(header(
		"Retry-After", "25",
		"X-Rate-Limit-Problem", "appminute",
		"X-MinLimit-Remaining", "30",
		"X-AppMinLimit-Remaining", "0"), now))
	// Output:
	// key 1m0s rule: 30 remaining, limit unknown, reset unknown
	// app 1m0s rule: 0 remaining, limit unknown, reset 25s
	// refused for the app-wide limit
}

// ParseXero gives the fields themselves; what is absent is Unknown.
func ExampleParseXero() {
	x := headers.ParseXero(header("X-MinLimit-Remaining", "42", "X-Rate-Limit-Problem", "Minute"))
	fmt.Println(x.MinRemaining, x.DayRemaining == headers.Unknown, x.Problem)
	// Output: 42 true minute
}

// IETFReader reads the IETF RateLimit-Policy and RateLimit fields, which carry their own
// windows (w, in seconds): each policy's figure is about the rule of that window.
func Example_ietfReader() {
	printReport(headers.IETFReader.Read(header(
		"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=5000;w=86400`,
		"RateLimit", `"burst";r=40;t=12, "daily";r=4000;t=36000`), now))
	// Output:
	// key 1m0s rule: 40 remaining, limit 100, reset 12s
	// key 24h0m0s rule: 4000 remaining, limit 5000, reset 10h0m0s
}

// ParseIETF pairs the RateLimit-Policy and RateLimit members by name.
func ExampleParseIETF() {
	for _, p := range headers.ParseIETF(header(
		"RateLimit-Policy", `"default";q=100;w=60`,
		"RateLimit", `"default";r=40;t=12`)) {
		fmt.Printf("%s: %d of %d per %v left, reset in %v\n", p.Name, p.Remaining, p.Quota, p.Window, p.Reset)
	}
	// Output: default: 40 of 100 per 1m0s left, reset in 12s
}

// The X-RateLimit-* fields do not say their window: the reader is given it (GitHub's is an
// hour, and its reset is in epoch seconds).
func ExampleXRateLimitReader() {
	r := headers.XRateLimitReader(time.Hour, headers.ResetEpoch)
	printReport(r.Read(header(
		"X-RateLimit-Limit", "5000",
		"X-RateLimit-Remaining", "4321",
		"X-RateLimit-Reset", strconv.FormatInt(now.Add(20*time.Minute).Unix(), 10)), now))
	// Output: key 1h0m0s rule: 4321 remaining, limit 5000, reset 20m0s
}

// ResetAuto reads a small X-RateLimit-Reset as seconds from now and a large one as an epoch.
func ExampleParseXRateLimit() {
	delta := headers.ParseXRateLimit(header("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "7",
		"X-RateLimit-Reset", "30"), now, headers.ResetAuto)
	epoch := headers.ParseXRateLimit(header("X-RateLimit-Remaining", "0",
		"X-RateLimit-Reset", strconv.FormatInt(now.Add(time.Minute).Unix(), 10)), now, headers.ResetAuto)
	fmt.Println(delta.Limit, delta.Remaining, delta.Reset)
	fmt.Println(epoch.Limit == headers.Unknown, epoch.Remaining, epoch.Reset)
	// Output:
	// 100 7 30s
	// true 0 1m0s
}

// Retry-After is seconds or an HTTP-date; what cannot be read is not OK.
func ExampleRetryAfter() {
	for _, v := range []string{"120", now.Add(90 * time.Second).Format(http.TimeFormat), "1.5", ""} {
		wait, ok := headers.RetryAfter(header("Retry-After", v), now)
		fmt.Printf("%q: %v %v\n", v, wait, ok)
	}
	// Output:
	// "120": 2m0s true
	// "Fri, 15 Jan 2027 12:01:30 GMT": 1m30s true
	// "1.5": 0s false
	// "": 0s false
}

// An HTTP-date is measured from the response's own Date, so that a skew between the
// upstream's clock and ours does not change the wait; a Date hours off is ignored.
func ExampleParseRetryAfter() {
	ahead := now.Add(30 * time.Second) // the upstream's clock is 30 s ahead
	f := headers.ParseRetryAfter(header(
		"Date", ahead.Format(http.TimeFormat),
		"Retry-After", ahead.Add(5*time.Second).Format(http.TimeFormat)), now)
	fmt.Println(f.Wait, f.OK, f.DateIgnored)

	never := time.Unix(0, 0) // a server whose clock was never set
	f = headers.ParseRetryAfter(header(
		"Date", never.Format(http.TimeFormat),
		"Retry-After", now.Add(5*time.Second).Format(http.TimeFormat)), now)
	fmt.Println(f.Wait, f.OK, f.DateIgnored)
	// Output:
	// 5s true false
	// 5s true true
}

// Shopify's "used/size" field says the bucket's level: the free room is what remains.
func ExampleShopifyReader() {
	printReport(headers.ShopifyReader(20*time.Second).Read(header("X-Shopify-Shop-Api-Call-Limit", "32/40"), now))
	// Output: key 20s rule: 8 remaining, limit 40, reset unknown
}

func ExampleParseShopifyCallLimit() {
	c := headers.ParseShopifyCallLimit(header("X-Shopify-Shop-Api-Call-Limit", "32/40"))
	bad := headers.ParseShopifyCallLimit(header("X-Shopify-Shop-Api-Call-Limit", "32 of 40"))
	fmt.Println(c.Used, c.Size, bad.Used == headers.Unknown)
	// Output: 32 40 true
}

// HubSpot's fields give the 10 s interval's and the day's figures.
func ExampleHubSpotReader() {
	printReport(headers.HubSpotReader(10*time.Second, 24*time.Hour).Read(header(
		"X-HubSpot-RateLimit-Max", "100",
		"X-HubSpot-RateLimit-Remaining", "97",
		"X-HubSpot-RateLimit-Interval-Milliseconds", "10000",
		"X-HubSpot-RateLimit-Daily", "250000",
		"X-HubSpot-RateLimit-Daily-Remaining", "249000"), now))
	// Output:
	// key 10s rule: 97 remaining, limit 100, reset unknown
	// key 24h0m0s rule: 249000 remaining, limit 250000, reset unknown
}

func ExampleParseHubSpot() {
	h := headers.ParseHubSpot(header(
		"X-HubSpot-RateLimit-Max", "100",
		"X-HubSpot-RateLimit-Remaining", "97",
		"X-HubSpot-RateLimit-Interval-Milliseconds", "10000"))
	fmt.Println(h.Max, h.Remaining, h.Interval, h.Daily == headers.Unknown) // OAuth calls have no daily limit
	// Output: 100 97 10s true
}

// Refused tells a rate-limit refusal from a permission error: every 429, and a 403 that says
// it is about a limit the way GitHub does.
func ExampleRefused() {
	fmt.Println(headers.Refused(http.StatusTooManyRequests, header()))
	fmt.Println(headers.Refused(http.StatusForbidden, header("X-RateLimit-Remaining", "0")))
	fmt.Println(headers.Refused(http.StatusForbidden, header("Retry-After", "60")))
	fmt.Println(headers.Refused(http.StatusForbidden, header("X-RateLimit-Remaining", "4999")))
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
		Header: header("Content-Type", "application/json; charset=utf-8", "X-RateLimit-Remaining", "4990"),
		Body:   io.NopCloser(strings.NewReader(body))}
	fmt.Println(headers.Refused(resp.StatusCode, resp.Header), headers.GitHubSecondary(resp))
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(len(b) == len(body))

	perm := &http.Response{StatusCode: http.StatusForbidden, Header: header("Content-Type", "application/json"),
		Body: io.NopCloser(strings.NewReader(`{"message":"Resource not accessible by integration"}`))}
	fmt.Println(headers.GitHubSecondary(perm))
	// Output:
	// false true
	// true
	// false
}

// GitHubSecondaryWithin waits at most d for the body, for a caller that must return at the
// header; a body already there is read at once.
func ExampleGitHubSecondaryWithin() {
	resp := &http.Response{StatusCode: http.StatusForbidden, Header: header("Content-Type", "application/json"),
		Body: io.NopCloser(strings.NewReader(`{"message":"You have exceeded a secondary rate limit."}`))}
	fmt.Println(headers.GitHubSecondaryWithin(resp, 100*time.Millisecond))
	resp.Body.Close()
	// Output: true
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
	printReport(r.Read(header("Acme-Calls-Left", "250"), now))
	// Output:
	// acme (windows 1h0m0s)
	// key 1h0m0s rule: 250 remaining, limit unknown, reset unknown
}

package cost

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func response(ct, body string, kv ...string) *http.Response {
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

func TestShopifyGraphQLReadsCostAndThrottle(t *testing.T) {
	read := ShopifyGraphQL(20 * time.Second)
	rep := read.ReadCost(response("application/json", `{"data":{},"extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":46.5,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":953.7,"restoreRate":50.0}}}}`), now)
	want := headers.Signal{Window: 20 * time.Second, Remaining: 953, Limit: 1000, Reset: headers.Unknown}
	if rep.Cost != 47 || len(rep.Signals) != 1 || rep.Signals[0] != want {
		t.Fatalf("got %+v, want cost 47 and %+v", rep, want)
	}
	// Throttled: actualQueryCost null (Shopify's THROTTLED answer).
	rep = read.ReadCost(response("application/json", `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":300,"actualQueryCost":null,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":120.0,"restoreRate":50.0}}}}`), now)
	if rep.Cost != Unknown || len(rep.Signals) != 1 || rep.Signals[0].Remaining != 120 || rep.Pause != 3600*time.Millisecond {
		t.Fatalf("throttled: %+v, want cost Unknown, 120 remaining and a pause of (300 − 120) / 50 = 3.6 s", rep)
	}
	for _, r := range []*http.Response{response("text/html", `{"extensions":{"cost":{"actualQueryCost":1}}}`), response("application/json", `not json`), response("application/json", `{"data":{}}`)} {
		if rep := read.ReadCost(r, now); rep.Cost != Unknown || len(rep.Signals) != 0 {
			t.Fatalf("%v: %+v, want nothing", r.Header, rep)
		}
	}
	if w := read.Windows(); len(w) != 1 || w[0] != (headers.Window{Window: 20 * time.Second}) {
		t.Fatalf("windows %v", w)
	}
}

// TestShopifyThrottledPausesUntilTheQueryFits: a throttled query's pause is the time the bucket
// takes to hold its requested cost, rounded up to the millisecond and at most the bucket's
// window; a query that ran, or figures that do not say, give none.
func TestShopifyThrottledPausesUntilTheQueryFits(t *testing.T) {
	read := ShopifyGraphQL(20 * time.Second)
	body := func(actual, status string) string {
		return `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":` + actual + `,"throttleStatus":` + status + `}}}`
	}
	for _, c := range []struct {
		name, body string
		want       time.Duration
	}{
		{"101 asked, 1 held, 100 a second", body("null", `{"maximumAvailable":1000.0,"currentlyAvailable":1.0,"restoreRate":100.0}`), time.Second},
		{"a fraction of a millisecond rounds up", body("null", `{"maximumAvailable":1000.0,"currentlyAvailable":100.95,"restoreRate":100.0}`), time.Millisecond},
		{"longer than the window", body("null", `{"maximumAvailable":1000.0,"currentlyAvailable":0.0,"restoreRate":1.0}`), 20 * time.Second},
		{"the query ran", body("101", `{"maximumAvailable":1000.0,"currentlyAvailable":1.0,"restoreRate":100.0}`), 0},
		{"no restore rate", body("null", `{"maximumAvailable":1000.0,"currentlyAvailable":1.0}`), 0},
		{"a zero restore rate", body("null", `{"maximumAvailable":1000.0,"currentlyAvailable":1.0,"restoreRate":0}`), 0},
		{"enough held", body("null", `{"maximumAvailable":1000.0,"currentlyAvailable":500.0,"restoreRate":100.0}`), 0},
		{"no throttle status", body("null", `null`), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := read.ReadCost(response("application/json", c.body), now).Pause; got != c.want {
				t.Fatalf("pause %v, want %v", got, c.want)
			}
		})
	}
}

func TestGitHubGraphQLReadsRateLimit(t *testing.T) {
	read := GitHubGraphQL(time.Hour)
	reset := now.Add(30 * time.Minute).Format(time.RFC3339)
	rep := read.ReadCost(response("application/json; charset=utf-8", `{"data":{"rateLimit":{"cost":2,"limit":5000,"remaining":4800,"resetAt":"`+reset+`"}}}`), now)
	want := headers.Signal{Window: time.Hour, Remaining: 4800, Limit: 5000, Reset: 30 * time.Minute}
	if rep.Cost != 2 || len(rep.Signals) != 1 || rep.Signals[0] != want {
		t.Fatalf("got %+v, want cost 2 and %+v", rep, want)
	}
	// Without rateLimit in the body: no cost, remaining from the X-RateLimit-* fields.
	rep = read.ReadCost(response("application/json", `{"data":{"viewer":{"login":"x"}}}`,
		"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4321", "X-RateLimit-Reset", strconv.FormatInt(now.Unix()+60, 10)), now)
	want = headers.Signal{Window: time.Hour, Remaining: 4321, Limit: 5000, Reset: time.Minute}
	if rep.Cost != Unknown || len(rep.Signals) != 1 || rep.Signals[0] != want {
		t.Fatalf("headers only: %+v, want %+v", rep, want)
	}
}

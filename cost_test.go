package ratemonitor

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// costOf reads a test request's cost from its X-Cost header.
func costOf(req *http.Request) int {
	n, err := strconv.Atoi(req.Header.Get("X-Cost"))
	if err != nil {
		return 1
	}
	return n
}

// realCost reads the cost the test upstream says it charged from X-Real-Cost.
var realCost = cost.ReaderFunc(func(resp *http.Response, _ time.Time) cost.Report {
	n, err := strconv.Atoi(resp.Header.Get("X-Real-Cost"))
	if err != nil {
		return cost.Report{Cost: cost.Unknown}
	}
	return cost.Report{Cost: n}
})

// TestCostChargedAndOutOfRangeCostRefused: a request counts as its cost, in both modes; a cost
// below 1 or above the limit is refused before anything is sent or recorded, naming the cost and
// the rule.
func TestCostChargedAndOutOfRangeCostRefused(t *testing.T) {
	ten := strategy.Rule{Limit: 10, Window: time.Minute}
	for _, paced := range []bool{false, true} {
		t.Run(map[bool]string{false: "monitoring", true: "paced"}[paced], func(t *testing.T) {
			opts := []Option{WithCost(costOf), WithKeyFunc(func(*http.Request) string { return "k" })}
			if paced {
				opts = append(opts, WithPacing())
			}
			c, tr, _ := syncOn(t, []strategy.Rule{ten}, opts...)
			srv, hits := upstreamtest.Counting(t, nil)
			upstreamtest.Get(t, c, srv.URL, "X-Cost", "4")
			if got := usedOf(t, tr, "k"); got[0] != 4 {
				t.Fatalf("paced %v: used %v after a request of cost 4", paced, got)
			}
			for _, bad := range []struct {
				cost string
				want error
				says string
			}{{"11", strategy.ErrBurstTooLarge, "request cost 11"}, {"0", strategy.ErrInvalidBurst, "request cost 0"}} {
				_, err := upstreamtest.Get(t, c, srv.URL, "X-Cost", bad.cost)
				if !errors.Is(err, bad.want) || !strings.Contains(err.Error(), bad.says) || !strings.Contains(err.Error(), "WithCost") {
					t.Fatalf("paced %v: cost %s: %v", paced, bad.cost, err)
				}
				if bad.cost == "11" && !strings.Contains(err.Error(), "10/1m0s") {
					t.Fatalf("cost 11: %v does not name the rule", err)
				}
			}
			if hits.Load() != 1 || usedOf(t, tr, "k")[0] != 4 {
				t.Fatalf("paced %v: refused costs were sent (%d hits) or recorded (used %v)", paced, hits.Load(), usedOf(t, tr, "k"))
			}
		})
	}
}

// TestCostFuncPanicIsError: a cost function that panics makes RoundTrip return an error, not
// panic.
func TestCostFuncPanicIsError(t *testing.T) {
	tr, err := New(http.DefaultTransport,
		WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		WithCost(func(req *http.Request) int { return len(req.Header["X"][0]) })) // no X: index out of range
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

// TestCostCorrectedToTheReportedCost: the charge moves to the cost the response reports: up in both
// modes, and down under pacing (released at the reserve's instant); in monitoring mode a lower cost
// is kept (an over-count). A response that reports nothing leaves the charge.
func TestCostCorrectedToTheReportedCost(t *testing.T) {
	ten := strategy.Rule{Limit: 10, Window: time.Minute}
	for _, paced := range []bool{false, true} {
		t.Run(map[bool]string{false: "monitoring", true: "paced"}[paced], func(t *testing.T) {
			opts := []Option{WithCost(costOf), WithCostReport(realCost), WithKeyFunc(func(r *http.Request) string { return r.Header.Get("K") })}
			if paced {
				opts = append(opts, WithPacing())
			}
			c, tr, _ := syncOn(t, []strategy.Rule{ten}, opts...)
			a := &upstreamtest.Answer{}
			srv, _ := upstreamtest.Counting(t, a.Serve)
			a.Set(200, "X-Real-Cost", "7")
			upstreamtest.Get(t, c, srv.URL, "X-Cost", "4", "K", "up")
			if got := usedOf(t, tr, "up")[0]; got != 7 {
				t.Fatalf("paced %v: charged 4, real 7: used %d", paced, got)
			}
			a.Set(200, "X-Real-Cost", "1")
			upstreamtest.Get(t, c, srv.URL, "X-Cost", "4", "K", "down")
			want := 4
			if paced {
				want = 1
			}
			if got := usedOf(t, tr, "down")[0]; got != want {
				t.Fatalf("paced %v: charged 4, real 1: used %d, want %d", paced, got, want)
			}
			a.Set(200)
			upstreamtest.Get(t, c, srv.URL, "X-Cost", "3", "K", "silent")
			if got := usedOf(t, tr, "silent")[0]; got != 3 {
				t.Fatalf("paced %v: no report: used %d, want the charge 3", paced, got)
			}
		})
	}
}

// TestShopifyGraphQLCostCorrectedAndAvailableLearnt: the Shopify reader corrects the charge to
// actualQueryCost, feeds currentlyAvailable to the token bucket as its remaining points (WithSync),
// and leaves the body whole for the caller.
func TestShopifyGraphQLCostCorrectedAndAvailableLearnt(t *testing.T) {
	rule, err := tokenbucket.Rule(1000, 50)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tokenbucket.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(t0)
	st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tr := newTransport(t, nil, WithStore(st), WithStrategy(s), WithPacing(), WithCost(costOf),
		WithCostReport(cost.ShopifyGraphQL(rule.Window)), WithSync(SyncConfig{Readers: []headers.Reader{}}),
		WithKeyFunc(func(*http.Request) string { return "shop" }))
	c := &http.Client{Transport: tr}
	available := "988.0"
	body := func() string {
		return `{"data":{"shop":{"name":"x"}},"extensions":{"cost":{"requestedQueryCost":50,"actualQueryCost":12,` +
			`"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":` + available + `,"restoreRate":50.0}}}}`
	}
	srv, _ := upstreamtest.Counting(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, body())
	})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"query":"{shop{name}}"}`))
	req.Header.Set("X-Cost", "50")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != body() {
		t.Fatalf("the caller read %q, want the whole body %q", got, body())
	}
	if u := usedOf(t, tr, "shop")[0]; u != 12 {
		t.Fatalf("charged 50, actualQueryCost 12: used %d, want 12", u)
	}
	// Another client of the shop spent points: currentlyAvailable 900 raises usage to 100.
	available = "900.0"
	req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
	req.Header.Set("X-Cost", "12")
	get2(t, c, req)
	if u := status(t, tr, "shop").Rules[0]; u.Used != 100 || u.Reported != 900 {
		t.Fatalf("after currentlyAvailable 900: %+v, want used 100", u)
	}
}

// TestGitHubGraphQLCostAndRemainingLearnt: the GitHub reader takes data.rateLimit's cost and
// remaining points.
func TestGitHubGraphQLCostAndRemainingLearnt(t *testing.T) {
	hour := strategy.Rule{Limit: 5000, Window: time.Hour}
	c, tr, _ := syncOn(t, []strategy.Rule{hour}, WithPacing(), WithCostReport(cost.GitHubGraphQL(time.Hour)),
		WithSync(SyncConfig{Readers: []headers.Reader{}}), WithKeyFunc(func(*http.Request) string { return "tok" }))
	reset := t0.Add(40 * time.Minute).UTC().Format(time.RFC3339)
	srv, _ := upstreamtest.Counting(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":{"viewer":{"login":"x"},"rateLimit":{"cost":3,"limit":5000,"remaining":4990,"resetAt":"`+reset+`"}}}`)
	})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
	get2(t, c, req)
	if u := status(t, tr, "tok").Rules[0]; u.Used != 10 || u.Reported != 4990 {
		t.Fatalf("charged 1, cost 3, remaining 4990: %+v, want used 10", u)
	}
}

func get2(t *testing.T, c *http.Client, req *http.Request) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

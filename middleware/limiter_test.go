package middleware

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

const peer = "192.0.2.1:40000"

func TestFixedWindowRefusalFieldsAndProblem(t *testing.T) {
	store, clk := newStore(t)
	s := must(fixedwindow.New(strategy.Rule{Limit: 3, Window: 10 * time.Second}))
	l, err := New(store, s)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// the fields are set before the wrapped handler runs
		seen = append(seen, w.Header().Get("RateLimit"))
		_, _ = w.Write([]byte("ok"))
	})
	h := l.Wrap(next)
	policy := `"3-per-10s";q=3;w=10`
	for i, r := range []string{`"3-per-10s";r=2;t=9`, `"3-per-10s";r=1;t=9`, `"3-per-10s";r=0;t=9`} {
		w := serve(h, "/things", peer, nil)
		if w.Code != http.StatusOK || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i+1, w.Code, w.Body)
		}
		wantHeader(t, w, map[string]string{"RateLimit-Policy": policy, "RateLimit": r})
		if w.Header().Get("Retry-After") != "" {
			t.Errorf("request %d: Retry-After on an admitted request", i+1)
		}
		if seen[i] != r {
			t.Errorf("request %d: next saw RateLimit %q, want %q", i+1, seen[i], r)
		}
	}
	w := serve(h, "/things", peer, nil)
	if len(seen) != 3 {
		t.Errorf("next was called %d times, want 3", len(seen))
	}
	// clock at 1001.25 s, window [1000, 1010): 8.75 s, rounded up
	wantHeader(t, w, map[string]string{"Retry-After": "9", "RateLimit-Policy": policy,
		"RateLimit": `"3-per-10s";r=0;t=9`})
	wantProblem(t, w, problemDetails{Type: "about:blank", Title: "Too Many Requests", Status: 429,
		Detail: `Rate limit "3-per-10s" (3 per 10s) is used up; retry after 9 s.`, Instance: "/things"})

	// 8.749 s later it is still refused, with Retry-After 1; at the window's end, admitted.
	clk.Advance(8749 * time.Millisecond)
	w = serve(h, "/things", peer, nil)
	wantHeader(t, w, map[string]string{"Retry-After": "1", "RateLimit": `"3-per-10s";r=0;t=1`})
	clk.Advance(time.Millisecond)
	if w = serve(h, "/things", peer, nil); w.Code != http.StatusOK {
		t.Fatalf("at the window's end: %d, want 200", w.Code)
	}
	wantHeader(t, w, map[string]string{"RateLimit": `"3-per-10s";r=2;t=10`})
}

func TestTokenBucketRetryAfterIsNextToken(t *testing.T) {
	store, clk := newStore(t)
	// capacity 2, one token back every 5 s
	l, err := New(store, must(tokenbucket.New(strategy.Rule{Limit: 2, Window: 10 * time.Second})))
	if err != nil {
		t.Fatal(err)
	}
	h := l.Wrap(&counting{})
	for range 2 {
		if w := serve(h, "/", peer, nil); w.Code != http.StatusOK {
			t.Fatalf("%d, want 200", w.Code)
		}
	}
	clk.Advance(1500 * time.Millisecond)
	w := serve(h, "/", peer, nil)
	// 0.3 tokens back after 1.5 s: the next token in 3.5 s, full in 8.5 s
	wantHeader(t, w, map[string]string{"Retry-After": "4", "RateLimit": `"2-per-10s";r=0;t=9`,
		"RateLimit-Policy": `"2-per-10s";q=2;w=10`})
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("%d, want 429", w.Code)
	}
}

func TestRollingWindowRetryAfterIsOldestLeaving(t *testing.T) {
	store, clk := newStore(t)
	l, err := New(store, must(rollingwindow.New(strategy.Rule{Limit: 2, Window: 10 * time.Second})))
	if err != nil {
		t.Fatal(err)
	}
	h := l.Wrap(&counting{})
	serve(h, "/", peer, nil) // at 1001.25
	clk.Advance(3250 * time.Millisecond)
	serve(h, "/", peer, nil) // at 1004.5
	clk.Advance(1500 * time.Millisecond)
	w := serve(h, "/", peer, nil) // at 1006: the first leaves at 1011.25, the second at 1014.5
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("%d, want 429", w.Code)
	}
	wantHeader(t, w, map[string]string{"Retry-After": "6", "RateLimit": `"2-per-10s";r=0;t=9`})
}

func TestTwoRulesRefusalNamesFullRule(t *testing.T) {
	store, clk := newStore(t)
	s := must(rollingwindow.New(
		strategy.Rule{Limit: 3, Window: 10 * time.Second},
		strategy.Rule{Limit: 4, Window: time.Minute}))
	l, err := New(store, s, WithProblemType("https://example.com/problems/rate-limit"),
		WithInstance(func(r *http.Request) string { return "urn:req:" + r.Header.Get("X-Request-Id") }))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	h := l.Wrap(next)
	policy := `"3-per-10s";q=3;w=10, "4-per-60s";q=4;w=60`
	for range 3 {
		serve(h, "/", peer, nil)
	}
	w := serve(h, "/a", peer, map[string]string{"X-Request-Id": "7"})
	wantHeader(t, w, map[string]string{"Retry-After": "10", "RateLimit-Policy": policy,
		"RateLimit": `"3-per-10s";r=0;t=10, "4-per-60s";r=1;t=60`})
	wantProblem(t, w, problemDetails{Type: "https://example.com/problems/rate-limit", Title: "Too Many Requests",
		Status: 429, Detail: `Rate limit "3-per-10s" (3 per 10s) is used up; retry after 10 s.`, Instance: "urn:req:7"})

	clk.Advance(10 * time.Second) // 1011.25: the 10 s rule is free again
	if w = serve(h, "/", peer, nil); w.Code != http.StatusOK {
		t.Fatalf("%d, want 200", w.Code)
	}
	w = serve(h, "/b", peer, nil)
	wantHeader(t, w, map[string]string{"Retry-After": "50",
		"RateLimit": `"3-per-10s";r=2;t=10, "4-per-60s";r=0;t=60`})
	wantProblem(t, w, problemDetails{Type: "https://example.com/problems/rate-limit", Title: "Too Many Requests",
		Status: 429, Detail: `Rate limit "4-per-60s" (4 per 60s) is used up; retry after 50 s.`, Instance: "urn:req:"})
	if n := next.Calls.Load(); n != 4 {
		t.Errorf("next called %d times, want 4", n)
	}
}

func TestPolicyNamesDefaultOrGiven(t *testing.T) {
	store, _ := newStore(t)
	s := must(fixedwindow.New(
		strategy.Rule{Limit: 10, Window: 500 * time.Millisecond, Granularity: 500 * time.Millisecond},
		strategy.Rule{Limit: 10, Window: 500 * time.Millisecond, Granularity: 100 * time.Millisecond},
		strategy.Rule{Limit: 100, Window: time.Minute, Margin: time.Second, Headroom: 10}))
	l, err := New(store, s)
	if err != nil {
		t.Fatal(err)
	}
	w := serve(l.Wrap(&counting{}), "/", peer, nil)
	wantHeader(t, w, map[string]string{
		"RateLimit-Policy": `"10-per-500ms";q=10;w=1, "10-per-500ms-2";q=10;w=1, "90-per-61s";q=90;w=61`})

	l, err = New(store, s, WithPolicyNames("burst", "burst-fine", "minute"))
	if err != nil {
		t.Fatal(err)
	}
	w = serve(l.Wrap(&counting{}), "/", "192.0.2.2:1", nil)
	wantHeader(t, w, map[string]string{
		"RateLimit-Policy": `"burst";q=10;w=1, "burst-fine";q=10;w=1, "minute";q=90;w=61`})
}

func TestSecondsRoundUp(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{-time.Hour, 0}, {0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {8750 * time.Millisecond, 9}} {
		t.Run(c.d.String(), func(t *testing.T) {
			if got := seconds(c.d); got != c.want {
				t.Errorf("seconds(%v) = %d, want %d", c.d, got, c.want)
			}
		})
	}
}

// TestFixedMultiRuleWaitingRetryAfterAdmits: a fixed window of 1 a second and 2 a minute, after a
// 200 and a 429: a client that waits the Retry-After it was given is admitted. The refused attempt
// is counted in every rule, so the minute rule is full after it; Retry-After must count that rule
// too, not only the ones that were over (it did not, and the client was refused again). The same
// through the SQLite store, whose own arithmetic decides a fixed window, is
// cache/sqlitestore/internal/transporttest's TestFixedMultiRuleWaitingRetryAfterAdmitsSQLite.
func TestFixedMultiRuleWaitingRetryAfterAdmits(t *testing.T) {
	st, clk := newStore(t) // memory store, manual clock at 1001.25
	s := must(fixedwindow.New(
		strategy.Rule{Limit: 1, Window: time.Second},
		strategy.Rule{Limit: 2, Window: time.Minute},
	))
	h := &counting{}
	lim, err := New(st, s)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := lim.Wrap(h)
	if w := serve(wrapped, "/", "1.2.3.4:5", nil); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := serve(wrapped, "/", "1.2.3.4:5", nil)
	if w.Code != 429 {
		t.Fatalf("second: %d", w.Code)
	}
	ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	t.Logf("Retry-After %d, RateLimit %s", ra, w.Header().Get("RateLimit"))
	clk.Advance(time.Duration(ra) * time.Second)
	if w := serve(wrapped, "/", "1.2.3.4:5", nil); w.Code != 200 {
		t.Errorf("after waiting Retry-After=%d s the client is refused again: %d, Retry-After %s, body %s",
			ra, w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

// TestPanickedRequestCountsAndHeadIsRefused: under 1 a minute, a request whose handler panics
// still counts, and a HEAD after it is refused with 429, Retry-After and RateLimit.
func TestPanickedRequestCountsAndHeadIsRefused(t *testing.T) {
	st, _ := newStore(t)
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	lim, _ := New(st, s)
	h := lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		w.WriteHeader(204)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/panic")
	if err == nil {
		resp.Body.Close()
	}
	req, _ := http.NewRequest("HEAD", srv.URL+"/x", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" {
		t.Errorf("HEAD after a panicking request: %d %v", resp.StatusCode, resp.Header)
	}
}

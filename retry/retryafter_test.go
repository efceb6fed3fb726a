package retry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestRetryAfterHonoured: a 429 with Retry-After: 1 is retried no sooner than a second later.
// The gap is measured on the real clock, but load cannot shrink it: the retry is made only after
// the 429 has come back, which is after the upstream noted its arrival, and then waits the
// Retry-After from there (a loaded machine makes the gap longer, never shorter).
func TestRetryAfterHonoured(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		first := len(arrivals) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr := newTransport(t, ratemonitor.WithPacing(), ratemonitor.WithSync(ratemonitor.SyncConfig{}),
		ratemonitor.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}))
	c := NewClient(tr)
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 5*time.Millisecond
	if _, err := fetch(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 3 || arrivals[1].Sub(arrivals[0]) < 900*time.Millisecond {
		t.Fatalf("arrivals %v: want 3, the retry at least ~1 s after the 429", arrivals)
	}
}

// TestRetryAfterCappedAndDated: Retry-After is capped at the Transport's MaxPause, and an
// HTTP-date is measured from the response's Date, not our clock, while that Date is within
// headers.MaxDateSkew of our clock.
func TestRetryAfterCappedAndDated(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}),
		ratemonitor.WithSync(ratemonitor.SyncConfig{MaxPause: 2 * time.Second}))
	zero := func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 0 }
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
	resp := &http.Response{StatusCode: 429, Header: http.Header{}, Request: req}
	resp.Header.Set("Retry-After", "100000")
	if got := Backoff(tr, zero)(0, 0, 1, resp); got != 2*time.Second {
		t.Errorf("Retry-After 100000 with MaxPause 2s: %v", got)
	}
	ahead := time.Now().Add(time.Minute).UTC()
	resp.Header.Set("Date", ahead.Format(http.TimeFormat))
	resp.Header.Set("Retry-After", ahead.Add(time.Second).Format(http.TimeFormat))
	if got := Backoff(tr, zero)(0, 0, 1, resp); got != time.Second {
		t.Errorf("a date 1 s after the upstream's own Date, its clock a minute ahead: %v", got)
	}
	// An hour ahead is not a skew but a wrong Date: measured from our clock, 1 h 1 s, capped.
	ahead = time.Now().Add(time.Hour).UTC()
	resp.Header.Set("Date", ahead.Format(http.TimeFormat))
	resp.Header.Set("Retry-After", ahead.Add(time.Second).Format(http.TimeFormat))
	if got := Backoff(tr, zero)(0, 0, 1, resp); got != 2*time.Second {
		t.Errorf("a date 1 s after a Date an hour ahead, MaxPause 2s: %v, want 2s", got)
	}
	if got := exponential(time.Second, 30*time.Second, 2, resp); got != 4*time.Second {
		t.Errorf("exponential ignores Retry-After: %v, want 4s", got)
	}
}

// TestRetryAfterImplausibleDateFromOurClock: a Retry-After of now + 5 s as an HTTP-date, in a
// response dated 1970, is a wait of 5 s from our clock, not the Transport's MaxPause (24 h); a Date
// 30 s ahead is a plausible skew and the wait is measured from it.
func TestRetryAfterImplausibleDateFromOurClock(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}))
	now := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
	req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/", nil)
	resp := &http.Response{StatusCode: 429, Header: http.Header{}, Request: req}
	resp.Header.Set("Date", "Thu, 01 Jan 1970 00:00:00 GMT")
	resp.Header.Set("Retry-After", now.Add(5*time.Second).Format(http.TimeFormat))
	if got := floor(tr, resp, now); got != 5*time.Second {
		t.Errorf("Retry-After now+5s dated 1970: %v, want 5s", got)
	}
	resp.Header.Set("Date", now.Add(30*time.Second).Format(http.TimeFormat))
	resp.Header.Set("Retry-After", now.Add(35*time.Second).Format(http.TimeFormat))
	if got := floor(tr, resp, now); got != 5*time.Second {
		t.Errorf("Retry-After 5 s after a Date 30 s ahead: %v, want 5s", got)
	}
}

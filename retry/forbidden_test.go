package retry

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestRetryOnlyRateLimit403: a 403 that is about a rate limit (GitHub's primary limit:
// X-RateLimit-Remaining 0; a secondary one: Retry-After) is retried, after its reset or
// Retry-After; a 403 about permissions is not (its wait is the base backoff's, 1 ms); a context
// that has ended retries nothing. The wait until the reset is read on the real clock: it is
// checked against the time left to the reset just before and just after Backoff reads it, so
// that a loaded machine's delay between the steps cannot fail it.
func TestRetryOnlyRateLimit403(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}))
	check := CheckRetry(tr, retryablehttp.DefaultRetryPolicy)
	backoff := Backoff(tr, exponential)
	resp := func(kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		req, _ := http.NewRequest(http.MethodGet, "http://api.github.test/user", nil)
		return &http.Response{StatusCode: http.StatusForbidden, Header: h, Request: req}
	}
	resetAt := time.Unix(time.Now().Add(90*time.Second).Unix(), 0)
	primary := resp("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(resetAt.Unix(), 10))
	secondary := resp("Retry-After", "60")
	plain := resp()
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		resp  *http.Response
		retry bool
		wait  func(now time.Time) time.Duration // the wait asked for, seen at now
	}{
		{"primary", primary, true, resetAt.Sub},
		{"secondary", secondary, true, func(time.Time) time.Duration { return 60 * time.Second }},
		{"permissions", plain, false, func(time.Time) time.Duration { return time.Millisecond }},
	} {
		retry, err := check(ctx, c.resp, nil)
		if retry != c.retry || err != nil {
			t.Errorf("%s: CheckRetry = %v, %v; want %v, nil", c.name, retry, err, c.retry)
		}
		before := time.Now()
		d := backoff(time.Millisecond, 2*time.Millisecond, 0, c.resp)
		least, most := c.wait(time.Now()), c.wait(before)
		if d < least || d > most {
			t.Errorf("%s: backoff %v, want %v to %v", c.name, d, least, most)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if retry, err := check(done, primary, nil); retry || err == nil {
		t.Errorf("ended context: CheckRetry = %v, %v; want false and the context's error", retry, err)
	}
}

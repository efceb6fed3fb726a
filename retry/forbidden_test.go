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

// TestRetryRateLimit403: a 403 that is about a rate limit (GitHub's primary limit:
// X-RateLimit-Remaining 0; a secondary one: Retry-After) is retried, after at least its reset or
// Retry-After; a 403 about permissions is not; a context that has ended retries nothing.
func TestRetryRateLimit403(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}))
	check := CheckRetry(tr, retryablehttp.DefaultRetryPolicy)
	backoff := Backoff(tr, Exponential)
	resp := func(kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		req, _ := http.NewRequest(http.MethodGet, "http://api.github.test/user", nil)
		return &http.Response{StatusCode: http.StatusForbidden, Header: h, Request: req}
	}
	reset := strconv.FormatInt(time.Now().Add(90*time.Second).Unix(), 10)
	primary := resp("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", reset)
	secondary := resp("Retry-After", "60")
	plain := resp()
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		resp  *http.Response
		retry bool
		least time.Duration
	}{{"primary", primary, true, 88 * time.Second}, {"secondary", secondary, true, 60 * time.Second}, {"permissions", plain, false, 0}} {
		retry, err := check(ctx, c.resp, nil)
		if retry != c.retry || err != nil {
			t.Errorf("%s: CheckRetry = %v, %v; want %v, nil", c.name, retry, err, c.retry)
		}
		if d := backoff(time.Millisecond, 2*time.Millisecond, 0, c.resp); d < c.least || d > c.least+3*time.Second && c.least > 0 {
			t.Errorf("%s: backoff %v, want about %v", c.name, d, c.least)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if retry, err := check(done, primary, nil); retry || err == nil {
		t.Errorf("ended context: CheckRetry = %v, %v; want false and the context's error", retry, err)
	}
}

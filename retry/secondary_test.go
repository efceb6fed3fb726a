package retry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func forbidden(body string) *http.Response {
	req, _ := http.NewRequest(http.MethodGet, "http://api.github.test/user", nil)
	h := http.Header{"Content-Type": {"application/json; charset=utf-8"}, "X-Ratelimit-Remaining": {"4990"}}
	return &http.Response{StatusCode: http.StatusForbidden, Header: h, Request: req, Body: io.NopCloser(strings.NewReader(body))}
}

// TestRetrySecondaryLimitMessage403: a GitHub 403 whose only sign of a secondary rate limit is
// its JSON message is retried after at least a minute, and its body still reads whole; a 403
// whose message is about permissions is not retried.
func TestRetrySecondaryLimitMessage403(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}))
	check := CheckRetry(tr, retryablehttp.DefaultRetryPolicy)
	backoff := Backoff(tr, exponential)
	const msg = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`
	sec := forbidden(msg)
	if retry, err := check(context.Background(), sec, nil); !retry || err != nil {
		t.Errorf("secondary-limit 403: CheckRetry = %v, %v; want true, nil", retry, err)
	}
	if d := backoff(time.Millisecond, 2*time.Millisecond, 0, sec); d != time.Minute {
		t.Errorf("secondary-limit 403: backoff %v, want 1m0s", d)
	}
	if b, err := io.ReadAll(sec.Body); err != nil || string(b) != msg {
		t.Errorf("the body after the peeks: %q, %v", b, err)
	}
	perm := forbidden(`{"message":"Resource not accessible by integration"}`)
	if retry, err := check(context.Background(), perm, nil); retry || err != nil {
		t.Errorf("permission 403: CheckRetry = %v, %v; want false, nil", retry, err)
	}
}

// TestRetryKeepsBaseError: a base policy that refuses a rate limit's 403 with an error of its
// own keeps its answer; CheckRetry overrides only a plain "no".
func TestRetryKeepsBaseError(t *testing.T) {
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}))
	stop := errors.New("policy: never retry a 403")
	check := CheckRetry(tr, func(context.Context, *http.Response, error) (bool, error) { return false, stop })
	resp := forbidden(`{}`)
	resp.Header.Set("Retry-After", "60")
	if retry, err := check(context.Background(), resp, nil); retry || !errors.Is(err, stop) {
		t.Errorf("CheckRetry = %v, %v; want false and the base's error", retry, err)
	}
}

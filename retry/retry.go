// Package retry builds a github.com/hashicorp/go-retryablehttp client that sends every attempt
// through a ratemonitor.Transport and waits between attempts as long as the upstream and the
// monitor say.
//
// Every attempt — the first, each retry and each redirect hop — is an HTTP request through the
// Transport, so each is counted (and, with ratemonitor.WithPacing, paced). Between attempts the
// client waits the longest of: retryablehttp's own backoff, the response's Retry-After (RFC
// 9110 §10.2.3), and the Transport's wait for one more request on the request's key. A wait
// that would pass the request context's deadline ends the retries at once with an error
// wrapping context.DeadlineExceeded, and a context that ends while waiting ends them too.
package retry

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/headers"
)

// NewClient returns a retryablehttp client with retryablehttp's defaults (4 retries, waits of
// 1 s to 30 s, DefaultRetryPolicy: connection errors, 429 and 5xx other than 501) except:
// HTTPClient sends through t, Backoff is Backoff(t, retryablehttp.DefaultBackoff), CheckRetry
// is CheckRetry(t, retryablehttp.DefaultRetryPolicy), and Logger is nil (quiet; set one to
// see each retry). Fields may be changed before the first request, as with any
// retryablehttp.Client; wrap replacements with Backoff and CheckRetry to keep the monitor's
// waits.
func NewClient(t *ratemonitor.Transport) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: t}
	c.Logger = nil
	c.Backoff = Backoff(t, retryablehttp.DefaultBackoff)
	c.CheckRetry = CheckRetry(t, retryablehttp.DefaultRetryPolicy)
	return c
}

// Backoff returns a retryablehttp.Backoff that waits the longest of base's answer, resp's
// Retry-After, and t's WaitTime for one request on resp's request's key. Without a response
// (a connection error) it is base's answer: the Transport still paces the next attempt when it
// was made WithPacing. The wait is capped at the time left before the request context's
// deadline, at which retryablehttp gives up with the context's error (CheckRetry gives up
// sooner, when it can tell).
func Backoff(t *ratemonitor.Transport, base retryablehttp.Backoff) retryablehttp.Backoff {
	return func(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
		d := base(minWait, maxWait, attempt, resp)
		if resp == nil {
			return d
		}
		d = max(d, floor(t, resp))
		if resp.Request != nil {
			if dl, ok := resp.Request.Context().Deadline(); ok {
				d = min(d, max(0, time.Until(dl)))
			}
		}
		return d
	}
}

// CheckRetry returns a retryablehttp.CheckRetry that asks base, and when base would retry but
// the least wait before the retry (Retry-After, and t's wait for the key) would pass ctx's
// deadline, gives up at once with an error wrapping context.DeadlineExceeded.
func CheckRetry(t *ratemonitor.Transport, base retryablehttp.CheckRetry) retryablehttp.CheckRetry {
	return func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		retry, cerr := base(ctx, resp, err)
		if !retry || resp == nil {
			return retry, cerr
		}
		dl, ok := ctx.Deadline()
		if !ok {
			return retry, cerr
		}
		if d := floor(t, resp); time.Until(dl) < d {
			what := "the request"
			if req := resp.Request; req != nil && req.URL != nil {
				what = req.Method + " " + req.URL.Redacted()
			}
			return false, fmt.Errorf("ratemonitor/retry: not retrying %s: the upstream or the monitor asks for a wait of %v, past the context's deadline: %w",
				what, d, context.DeadlineExceeded)
		}
		return retry, cerr
	}
}

// floor is the least wait before retrying resp's request: its Retry-After, and the monitor's
// wait for one more request on its key. A monitor error (a store that is down) adds nothing:
// the Transport's ErrorPolicy decides what happens to the retry itself.
func floor(t *ratemonitor.Transport, resp *http.Response) time.Duration {
	var d time.Duration
	if ra, ok := headers.RetryAfter(resp.Header, time.Now()); ok {
		d = ra
	}
	if req := resp.Request; req != nil {
		if w, err := t.WaitTime(req.Context(), t.Key(req), 1); err == nil {
			d = max(d, w)
		}
	}
	return d
}

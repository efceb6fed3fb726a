// Package retry builds a github.com/hashicorp/go-retryablehttp client that sends every attempt
// through a ratemonitor.Transport and waits between attempts as long as the upstream and the
// monitor say.
//
// Every attempt — the first, each retry and each redirect hop — is an HTTP request through the
// Transport, so each is counted (and, with ratemonitor.WithPacing, paced). Between attempts the
// client waits the longest of: retryablehttp's exponential backoff, the response's Retry-After
// (RFC 9110 §10.2.3, an HTTP-date measured from the response's Date while that is within
// headers.MaxDateSkew of our clock and from our clock otherwise, capped at the Transport's
// MaxPause), and the Transport's wait for one more request on the request's key. A wait that
// would pass the request context's deadline ends the retries at once with an error wrapping
// context.DeadlineExceeded — whether the Transport refused to wait (a *ratemonitor.DeadlineError)
// or a response asked for it — and a context that ends while waiting ends them too.
package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/credential"
	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// NewClient returns a retryablehttp client with retryablehttp's defaults (4 retries, waits of
// 1 s to 30 s, DefaultRetryPolicy: connection errors, 429 and 5xx other than 501) except:
// HTTPClient sends through t, Backoff is Backoff(t, retryablehttp.DefaultBackoff without its
// reading of Retry-After), CheckRetry is CheckRetry(t, retryablehttp.DefaultRetryPolicy),
// ErrorHandler is retryablehttp's default with the URLs in its error redacted (no query values,
// no user info), and Logger is nil (quiet; set one to see each retry, but retryablehttp logs
// URLs with their queries).
// Fields may be changed before the first request, as with any retryablehttp.Client; wrap
// replacements with Backoff and CheckRetry to keep the monitor's waits.
func NewClient(t *ratemonitor.Transport) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: t}
	c.Logger = nil
	c.Backoff = Backoff(t, exponential)
	c.CheckRetry = CheckRetry(t, retryablehttp.DefaultRetryPolicy)
	c.ErrorHandler = giveUp
	return c
}

// exponential is retryablehttp.DefaultBackoff without its reading of Retry-After: min × 2^attempt,
// capped at max. Backoff reads Retry-After itself, measured from the response's Date (when
// plausible, as headers.RetryAfter does) and capped.
func exponential(minWait, maxWait time.Duration, attempt int, _ *http.Response) time.Duration {
	return retryablehttp.DefaultBackoff(minWait, maxWait, attempt, nil)
}

// Backoff returns a retryablehttp.Backoff that waits the longest of base's answer, resp's
// Retry-After (capped at t.MaxPause()), and t's WaitTime for one request on resp's request's
// key. base should not read Retry-After itself (retryablehttp.DefaultBackoff does, uncapped and
// against the local clock): NewClient's base is DefaultBackoff given no response. Without a
// response (a connection error) it is base's answer: the Transport still paces the next
// attempt when it was made WithPacing. The wait is capped at the time left before the request
// context's deadline, at which retryablehttp gives up with the context's error (CheckRetry gives
// up sooner, when it can tell); without a deadline it is as long as the monitor says, which for
// a full day rule can be hours. After a redirect, resp is the last hop's, and so is the key.
func Backoff(t *ratemonitor.Transport, base retryablehttp.Backoff) retryablehttp.Backoff {
	return func(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
		d := base(minWait, maxWait, attempt, resp)
		if resp == nil {
			return d
		}
		d = max(d, floor(t, resp, time.Now()))
		if resp.Request != nil {
			if dl, ok := resp.Request.Context().Deadline(); ok {
				d = min(d, max(0, time.Until(dl)))
			}
		}
		return d
	}
}

// CheckRetry returns a retryablehttp.CheckRetry that asks base, except that it retries a 403
// that is about a rate limit (headers.Refused: X-RateLimit-Remaining: 0, or a Retry-After, as
// GitHub sends for its primary and secondary limits; or headers.GitHubSecondary: a JSON message
// naming a secondary rate limit, of which it reads the first 4 KiB) as it would a 429 when base
// says no without an error of its own (a base that must never retry a 403 should be wrapped to
// refuse after CheckRetry, not before), that it never retries
// when the Transport refused to wait past the deadline (a *ratemonitor.DeadlineError: a retry
// would only meet the same wait), and that when base would retry but the least wait before the
// retry (Retry-After, and t's wait for the key) would pass ctx's deadline, it gives up at once
// with an error wrapping context.DeadlineExceeded.
func CheckRetry(t *ratemonitor.Transport, base retryablehttp.CheckRetry) retryablehttp.CheckRetry {
	return func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		var de *ratemonitor.DeadlineError
		if errors.As(err, &de) {
			return false, err
		}
		retry, cerr := base(ctx, resp, err)
		if !retry && cerr == nil && err == nil && resp != nil && resp.StatusCode == http.StatusForbidden &&
			(headers.Refused(resp.StatusCode, resp.Header) || headers.GitHubSecondary(resp)) {
			// A rate limit's 403 (GitHub's primary limit says X-RateLimit-Remaining: 0, a
			// secondary one a Retry-After, or only its message): retry it after the pause, as
			// a 429. A base that gave an error of its own is not overridden.
			if cerr := ctx.Err(); cerr != nil {
				return false, cerr
			}
			retry, cerr = true, nil
		}
		if !retry || resp == nil {
			return retry, cerr
		}
		dl, ok := ctx.Deadline()
		if !ok {
			return retry, cerr
		}
		if d := floor(t, resp, time.Now()); time.Until(dl) < d {
			what := "the request"
			if req := resp.Request; req != nil && req.URL != nil {
				what = req.Method + " " + credential.URL(req.URL)
			}
			return false, fmt.Errorf("ratemonitor/retry: not retrying %s: the upstream or the monitor asks for a wait of %v, past the context's deadline: %w",
				what, d.Round(time.Millisecond), context.DeadlineExceeded)
		}
		return retry, cerr
	}
}

// floor is the least wait before retrying resp's request, at now (the local wall clock, which
// the request context's deadline is on too): its Retry-After, and on a refusal whose
// X-RateLimit-Remaining is 0 its X-RateLimit-Reset, a minute for a GitHub secondary limit's
// refusal that gives no wait (headers.GitHubSecondary), each capped at t.MaxPause(), and the
// monitor's wait for one more request on its key. A monitor error (a store that is down) adds
// nothing: the Transport's StoreErrorPolicy decides what happens to the retry itself. An
// implausible Date is reported by the Transport (WithSync), which sees the same response.
func floor(t *ratemonitor.Transport, resp *http.Response, now time.Time) time.Duration {
	var d time.Duration
	if ra, ok := headers.RetryAfter(resp.Header, now); ok {
		d = min(ra, t.MaxPause())
	}
	if headers.Refused(resp.StatusCode, resp.Header) {
		// A limit used up (X-RateLimit-Remaining: 0) frees at its X-RateLimit-Reset.
		if x := headerparse.ParseXRateLimit(resp.Header, now, headerparse.ResetAuto); x.Remaining == 0 && x.Reset > 0 {
			d = max(d, min(x.Reset, t.MaxPause()))
		}
	}
	if headers.GitHubSecondary(resp) {
		// GitHub: without retry-after, "wait for at least one minute before retrying"
		d = max(d, min(time.Minute, t.MaxPause()))
	}
	if req := resp.Request; req != nil {
		if w, err := t.WaitTime(req.Context(), t.Key(req), 1); err == nil {
			d = max(d, w)
		}
	}
	return d
}

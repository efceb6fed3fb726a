package headerparse_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// ResetAuto reads a small X-RateLimit-Reset as seconds from now and a large one as an epoch.
func ExampleParseXRateLimit() {
	now := time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC) // when the response arrived
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "100")
	h.Set("X-RateLimit-Remaining", "7")
	h.Set("X-RateLimit-Reset", "30")
	delta := headerparse.ParseXRateLimit(h, now, headerparse.ResetAuto)
	h = http.Header{}
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(time.Minute).Unix(), 10))
	epoch := headerparse.ParseXRateLimit(h, now, headerparse.ResetAuto)
	fmt.Println(delta.Limit, delta.Remaining, delta.Reset)
	fmt.Println(epoch.Limit == headerparse.Unknown, epoch.Remaining, epoch.Reset)
	// Output:
	// 100 7 30s
	// true 0 1m0s
}

// An HTTP-date is measured from the response's own Date, so that a skew between the
// upstream's clock and ours does not change the wait; a Date hours off is ignored.
func ExampleParseRetryAfter() {
	now := time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC) // when the response arrived
	ahead := now.Add(30 * time.Second)                   // the upstream's clock is 30 s ahead
	h := http.Header{}
	h.Set("Date", ahead.Format(http.TimeFormat))
	h.Set("Retry-After", ahead.Add(5*time.Second).Format(http.TimeFormat))
	f := headerparse.ParseRetryAfter(h, now)
	fmt.Println(f.Wait, f.OK, f.DateIgnored)

	never := time.Unix(0, 0) // a server whose clock was never set
	h.Set("Date", never.Format(http.TimeFormat))
	h.Set("Retry-After", now.Add(5*time.Second).Format(http.TimeFormat))
	f = headerparse.ParseRetryAfter(h, now)
	fmt.Println(f.Wait, f.OK, f.DateIgnored)
	// Output:
	// 5s true false
	// 5s true true
}

// GitHubSecondaryWithin waits at most d for the body, for a caller that must return at the
// header; a body already there is read at once.
func ExampleGitHubSecondaryWithin() {
	resp := &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"message":"You have exceeded a secondary rate limit."}`))}
	fmt.Println(headerparse.GitHubSecondaryWithin(resp, 5*time.Second)) // returns once the body is read
	resp.Body.Close()
	// Output: true
}

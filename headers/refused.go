package headers

import (
	"net/http"
	"strings"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// Refused reports whether a response with this status and header refuses its request for a
// rate limit: a 429 (RFC 6585 §4), or a 403 that says so the way GitHub does for its primary
// limit (X-RateLimit-Remaining: 0) or for a secondary limit (a Retry-After). Source: GitHub,
// "Rate limits for the REST API", https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api
// ("If you exceed your primary rate limit, you will receive a 403 or 429 response, and the
// x-ratelimit-remaining header will be 0"; for secondary limits "a 403 or 429 response" with a
// retry-after header when the wait is known). A 403 without either header is taken to be about
// permissions, not limits.
func Refused(status int, h http.Header) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusForbidden:
		return strings.TrimSpace(h.Get(fieldXRemaining)) == "0" || strings.TrimSpace(h.Get(fieldRetryAfter)) != ""
	}
	return false
}

// GitHubSecondary reports whether resp is a 403 or 429 for a GitHub secondary rate limit that
// its header does not show (no Retry-After, X-RateLimit-Remaining not 0: Refused is false for
// such a 403): its JSON body's message names the secondary rate limit ("You have exceeded a
// secondary rate limit"). Source: GitHub, "Rate limits for the REST API",
// https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits:
// "you will receive a 403 or 429 response and an error message that indicates that you
// exceeded a secondary rate limit"; without retry-after or x-ratelimit-remaining 0, "wait for
// at least one minute". A 403 without that message is about permissions. It reads at most
// 4 KiB of a JSON body before returning, and puts back a body that yields every byte (a read
// error comes after the bytes read).
func GitHubSecondary(resp *http.Response) bool { return headerparse.GitHubSecondary(resp) }

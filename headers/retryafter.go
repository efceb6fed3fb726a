// Package headers reads what an upstream's response says about its rate limits: Retry-After,
// Xero's X-*Limit-Remaining and X-Rate-Limit-Problem, the IETF RateLimit-Policy and RateLimit
// structured fields, and the older X-RateLimit-Limit/Remaining/Reset.
//
// Parsers never fail: a field that is absent or unreadable is reported as unknown, because a
// response's status and body matter more to the caller than a malformed hint about limits.
// Readers (Xero, IETF, XRateLimit) turn the parsed fields into Reports that say which rule each
// figure is about, for ratemonitor.WithSync.
package headers

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Unknown is the value of a count the response did not give, or gave in a form that could not
// be read.
const Unknown = -1

// maxSeconds is the largest number of seconds a time.Duration holds.
const maxSeconds = int64((1<<63 - 1) / time.Second)

// RetryAfter reads the Retry-After field (RFC 9110 §10.2.3) of h and returns how long to wait,
// with ok true when the field is there and readable.
//
// The field is either delay-seconds (a run of digits, no sign) or an HTTP-date in any of the
// three formats http.ParseTime accepts (IMF-fixdate, RFC 850, asctime). A date is measured from
// the response's own Date field when that is readable, so that a skew between the upstream's
// clock and ours does not change the wait, and from now otherwise; a date in the past gives 0.
// A delay longer than a time.Duration holds (292 years) is read as the longest one: callers cap
// waits (ratemonitor.SyncConfig.MaxPause). Anything else (empty, negative, fractional, words)
// gives ok false.
func RetryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get(fieldRetryAfter))
	if v == "" {
		return 0, false
	}
	if s, ok := unsigned(v); ok {
		return time.Duration(s) * time.Second, true
	}
	if allDigits(v) {
		return time.Duration(maxSeconds) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(h.Get(fieldDate)); err == nil {
		now = date
	}
	return max(0, at.Sub(now)), true
}

// unsigned reads a non-negative integer of digits only (no sign, no spaces), as delay-seconds
// and the X-RateLimit counts are written, refusing values a time.Duration cannot hold.
func unsigned(v string) (int64, bool) {
	if v == "" || v[0] < '0' || v[0] > '9' {
		return 0, false
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s > maxSeconds {
		return 0, false
	}
	return s, true
}

func allDigits(v string) bool {
	for i := range len(v) {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return v != ""
}

// count reads one header field as a non-negative count: Unknown when absent or unreadable.
func count(h http.Header, name string) int {
	s, ok := unsigned(strings.TrimSpace(h.Get(name)))
	if !ok || s > 1<<31 {
		return Unknown
	}
	return int(s)
}

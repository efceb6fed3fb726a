// Package headerparse reads the rate-limit fields whose full details the public headers package
// keeps to itself: Retry-After with the response's Date, the X-RateLimit-* family, and a GitHub
// secondary limit told by the body. headers, the root package, retry and profiles use it.
package headerparse

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Field names in canonical form (http.CanonicalHeaderKey), so that a lookup does not allocate.
const (
	FieldRetryAfter = "Retry-After"
	FieldDate       = "Date"
	FieldXLimit     = "X-Ratelimit-Limit"
	FieldXRemaining = "X-Ratelimit-Remaining"
	FieldXReset     = "X-Ratelimit-Reset"
)

// Unknown is headers.Unknown: a count the response did not give or that could not be read.
const Unknown = -1

// maxSeconds is the largest number of seconds a time.Duration holds.
const maxSeconds = int64((1<<63 - 1) / time.Second)

// MaxDateSkew is headers.MaxDateSkew: how far a response's Date may lie from the local clock and
// still be the instant an HTTP-date is measured from.
const MaxDateSkew = 5 * time.Minute

// RetryAfterField is what ParseRetryAfter read from a response's header.
type RetryAfterField struct {
	// Wait is how long to wait, never below 0; 0 when OK is false.
	Wait time.Duration
	// OK is true when Retry-After is there and readable.
	OK bool
	// Date is the response's Date field when Retry-After is a readable HTTP-date and Date is
	// readable too; the zero time otherwise.
	Date time.Time
	// DateIgnored is true when Date is set but more than MaxDateSkew from now: Wait was then
	// measured from now instead. Callers report it, since it means the upstream's Date is
	// wrong (and so, maybe, its Retry-After).
	DateIgnored bool
}

// ParseRetryAfter reads the Retry-After field (RFC 9110 §10.2.3) of h; now is the instant the
// response arrived, on the local clock.
//
// The field is either delay-seconds (a run of digits, no sign) or an HTTP-date in any of the
// three formats http.ParseTime accepts (IMF-fixdate, RFC 850, asctime). A date is measured from
// the response's own Date field when that is readable and within MaxDateSkew of now, so that a
// small skew between the upstream's clock and ours does not change the wait, and from now
// otherwise (DateIgnored says when a readable Date was too far off); a date in the past gives 0.
// A delay longer than a time.Duration holds (292 years) is read as the longest one: callers cap
// waits (ratemonitor.SyncConfig.MaxPause). Anything else (empty, negative, fractional, words)
// gives OK false.
func ParseRetryAfter(h http.Header, now time.Time) RetryAfterField {
	v := strings.TrimSpace(h.Get(FieldRetryAfter))
	if v == "" {
		return RetryAfterField{}
	}
	if s, ok := Unsigned(v); ok {
		return RetryAfterField{Wait: time.Duration(s) * time.Second, OK: true}
	}
	if allDigits(v) {
		return RetryAfterField{Wait: time.Duration(maxSeconds) * time.Second, OK: true}
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return RetryAfterField{}
	}
	f := RetryAfterField{OK: true}
	from := now
	if date, err := http.ParseTime(h.Get(FieldDate)); err == nil {
		f.Date = date
		if skew := date.Sub(now); skew <= MaxDateSkew && skew >= -MaxDateSkew {
			from = date
		} else {
			f.DateIgnored = true
		}
	}
	f.Wait = max(0, at.Sub(from))
	return f
}

// Unsigned reads a non-negative integer of digits only (no sign, no spaces), as delay-seconds
// and the X-RateLimit counts are written, refusing values a time.Duration cannot hold.
func Unsigned(v string) (int64, bool) {
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

// Count reads one header field as a non-negative count: Unknown when absent or unreadable.
func Count(h http.Header, name string) int {
	s, ok := Unsigned(strings.TrimSpace(h.Get(name)))
	if !ok || s > 1<<31 {
		return Unknown
	}
	return int(s)
}

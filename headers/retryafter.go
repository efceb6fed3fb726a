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

// MaxDateSkew is how far (either way) a response's Date may lie from the local clock and still
// be the instant an HTTP-date Retry-After is measured from: 5 minutes.
//
// Measuring from the upstream's own Date cancels a skew between its clock and ours: a server
// 30 s ahead that answers "Retry-After: 12:00:35" in a response dated 12:00:30 means 5 s. But a
// Date further off than any clock that is kept in step (NTP keeps them within a second) is the
// Date that is wrong, not the clock: a server whose clock was never set sends 1970, and a
// Retry-After of now + 5 s measured from it is 56 years (a whole MaxPause for the caller). Such a
// Date is ignored and the wait measured from the local clock. A server that writes its local
// time as GMT, hours off in both fields, is then measured from the local clock too: its
// Retry-After is as wrong as its Date, and the caller is told (RetryAfterField.DateIgnored).
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

// RetryAfter reads the Retry-After field (RFC 9110 §10.2.3) of h and returns how long to wait,
// with ok true when the field is there and readable. It is ParseRetryAfter without the details.
func RetryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	f := ParseRetryAfter(h, now)
	return f.Wait, f.OK
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
	v := strings.TrimSpace(h.Get(fieldRetryAfter))
	if v == "" {
		return RetryAfterField{}
	}
	if s, ok := unsigned(v); ok {
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
	if date, err := http.ParseTime(h.Get(fieldDate)); err == nil {
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

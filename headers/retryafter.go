// Package headers reads what an upstream's response says about its rate limits: Retry-After,
// Xero's X-*Limit-Remaining and X-Rate-Limit-Problem, the IETF RateLimit-Policy and RateLimit
// structured fields, and the older X-RateLimit-Limit/Remaining/Reset.
//
// Parsers never fail: a field that is absent or unreadable is reported as unknown, because a
// response's status and body matter more to the caller than a malformed hint about limits.
// Readers (XeroReader, IETFReader, XRateLimitReader and the others) turn the fields into
// Reports that say which rule each figure is about, for ratemonitor.WithSync.
package headers

import (
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// Unknown is the value of a count the response did not give, or gave in a form that could not
// be read.
const Unknown = -1

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
// Retry-After is as wrong as its Date, and a ratemonitor.Transport reports it (observe.SkewedDate).
const MaxDateSkew = headerparse.MaxDateSkew

// RetryAfter reads the Retry-After field (RFC 9110 §10.2.3) of h and returns how long to wait,
// with ok true when the field is there and readable; now is the instant the response arrived.
// The field is delay-seconds or an HTTP-date, which is measured from the response's Date when
// that is within MaxDateSkew of now, and from now otherwise; a date in the past gives 0. A delay
// longer than a time.Duration holds (292 years) is read as the longest one.
func RetryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	f := headerparse.ParseRetryAfter(h, now)
	return f.Wait, f.OK
}

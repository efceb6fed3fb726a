package headers

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// ResetMode says how to read X-RateLimit-Reset, which upstreams write two ways.
type ResetMode int

const (
	// ResetAuto takes a value of at least 10^9 as epoch seconds (2001-09-09 on) and a smaller
	// one as seconds from now. No rate-limit window is 31 years long, and no reset instant since
	// 2001 is below it, so the two never meet in practice.
	ResetAuto ResetMode = iota
	// ResetEpoch takes the value as Unix seconds (GitHub's convention).
	ResetEpoch
	// ResetDelta takes the value as seconds from now (as many other APIs write it).
	ResetDelta
)

// XRateLimitReader returns a Reader of the X-RateLimit-* fields for an upstream whose limit
// has the given window (they do not say it): the remaining count is about the request's key's
// rule with that window, X-RateLimit-Limit is the upstream's limit, and X-RateLimit-Reset,
// read as mode says, is when that usage is freed. An epoch reset is measured from the
// response's Date when that is within MaxDateSkew of now; one that has just passed is a second
// away, not 0 (the upstream still counted the old window when it answered).
// It declares the one window of the request's key.
func XRateLimitReader(window time.Duration, mode ResetMode) Declared {
	read := func(h http.Header, now time.Time) Report {
		x := headerparse.ParseXRateLimit(h, now, headerparse.ResetMode(mode))
		if x.Remaining == Unknown {
			return Report{}
		}
		return Report{Signals: []Signal{{Window: window, Remaining: x.Remaining, Limit: x.Limit, Reset: x.Reset}}}
	}
	return Declare(fmt.Sprintf("headers.XRateLimitReader(%v, %v)", window, mode), read, Window{Window: window})
}

// String returns "auto", "epoch" or "delta".
func (m ResetMode) String() string {
	switch m {
	case ResetAuto:
		return "auto"
	case ResetEpoch:
		return "epoch"
	case ResetDelta:
		return "delta"
	}
	return fmt.Sprintf("ResetMode(%d)", int(m))
}

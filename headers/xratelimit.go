package headers

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ResetMode says how to read X-RateLimit-Reset, which upstreams write two ways.
type ResetMode int

const (
	// ResetAuto takes a value of at least EpochThreshold as epoch seconds and a smaller one
	// as seconds from now. No rate-limit window is 31 years long, and no reset instant since
	// 2001 is below it, so the two never meet in practice.
	ResetAuto ResetMode = iota
	// ResetEpoch takes the value as Unix seconds (GitHub's convention).
	ResetEpoch
	// ResetDelta takes the value as seconds from now (as many other APIs write it).
	ResetDelta
)

// EpochThreshold is the value from which ResetAuto reads X-RateLimit-Reset as epoch seconds:
// 10^9 s, 2001-09-09 as an instant and 31.7 years as a delay.
const EpochThreshold = 1_000_000_000

// XRateLimit is the older, unstandardised X-RateLimit-* family (GitHub, many others).
type XRateLimit struct {
	Limit     int // X-RateLimit-Limit, or Unknown
	Remaining int // X-RateLimit-Remaining, or Unknown
	// Reset is how long from now until the window resets, never below 0; Unknown (-1ns) when
	// X-RateLimit-Reset is absent or unreadable.
	Reset time.Duration
}

// ParseXRateLimit reads X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset from h.
// Reset is read as mode says; now is the instant the response arrived. An epoch reset is
// measured from the response's Date when that is within MaxDateSkew of now (the upstream's
// clock, as ParseRetryAfter does), from now otherwise. One that has passed by less than
// MaxDateSkew is a second away (ResetResolution), not 0: the upstream still counted the old
// window when it answered. One further in the past gives 0. Values that are not whole
// non-negative numbers are Unknown.
func ParseXRateLimit(h http.Header, now time.Time, mode ResetMode) XRateLimit {
	x := XRateLimit{Limit: count(h, fieldXLimit), Remaining: count(h, fieldXRemaining), Reset: Unknown}
	v, ok := unsigned(strings.TrimSpace(h.Get(fieldXReset)))
	if !ok {
		return x
	}
	epoch := mode == ResetEpoch || (mode == ResetAuto && v >= EpochThreshold)
	if !epoch {
		x.Reset = time.Duration(v) * time.Second
		return x
	}
	if v > maxSeconds/2 { // beyond any instant time.Unix can subtract from now
		return x
	}
	from := now
	if date, err := http.ParseTime(h.Get(fieldDate)); err == nil && date.Sub(now) <= MaxDateSkew && now.Sub(date) <= MaxDateSkew {
		from = date
	}
	switch d := time.Unix(v, 0).Sub(from); {
	case d > 0:
		x.Reset = d
	case d > -MaxDateSkew:
		x.Reset = ResetResolution
	default:
		x.Reset = 0
	}
	return x
}

// ResetResolution is how long an epoch X-RateLimit-Reset that has just passed is taken to be
// away: the field counts whole seconds, and an upstream whose clock is behind ours refuses until
// its own clock reaches the reset (GitHub answered 403 with remaining 0 a second after the reset
// by ours; the pause was the 60 s fallback, while GitHub would have taken 880 more).
const ResetResolution = time.Second

// XRateLimitReader returns a Reader of the X-RateLimit-* fields for an upstream whose limit
// has the given window (they do not say it): the remaining count is about the request's key's
// rule with that window, X-RateLimit-Limit is the upstream's limit, and X-RateLimit-Reset,
// read as mode says, is when that usage is freed.
// It declares the one window of the request's key.
func XRateLimitReader(window time.Duration, mode ResetMode) Declared {
	read := func(h http.Header, now time.Time) Report {
		x := ParseXRateLimit(h, now, mode)
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

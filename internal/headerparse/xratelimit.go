package headerparse

import (
	"net/http"
	"strings"
	"time"
)

// ResetMode says how to read X-RateLimit-Reset; its values are those of headers.ResetMode.
type ResetMode int

const (
	ResetAuto  ResetMode = iota // epoch seconds from epochThreshold on, seconds from now below
	ResetEpoch                  // Unix seconds (GitHub's convention)
	ResetDelta                  // seconds from now
)

// epochThreshold is the value from which ResetAuto reads X-RateLimit-Reset as epoch seconds:
// 10^9 s, 2001-09-09 as an instant and 31.7 years as a delay.
const epochThreshold = 1_000_000_000

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
	x := XRateLimit{Limit: Count(h, FieldXLimit), Remaining: Count(h, FieldXRemaining), Reset: Unknown}
	v, ok := Unsigned(strings.TrimSpace(h.Get(FieldXReset)))
	if !ok {
		return x
	}
	epoch := mode == ResetEpoch || (mode == ResetAuto && v >= epochThreshold)
	if !epoch {
		x.Reset = time.Duration(v) * time.Second
		return x
	}
	if v > maxSeconds/2 { // beyond any instant time.Unix can subtract from now
		return x
	}
	from := now
	if date, err := http.ParseTime(h.Get(FieldDate)); err == nil && date.Sub(now) <= MaxDateSkew && now.Sub(date) <= MaxDateSkew {
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

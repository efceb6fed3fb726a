// Package bucket is the token bucket's counter (package tokenbucket makes the strategies), for
// the stores that keep it in a form of their own. Its arithmetic is exact: it keeps the missing
// tokens multiplied by the window in nanoseconds, and waits are rounded up to the nanosecond.
package bucket

import (
	"math"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// MaxProduct bounds a rule's Limit × effective window in nanoseconds, so that the exact
// arithmetic fits in 64 bits: 2^62, e.g. up to 53 million tokens per 24 h.
const MaxProduct = 1 << 62

// Bucket is the token-bucket engine.Counter for one rule and one key. The zero Bucket is not
// usable; make one with NewBucket. A Bucket is not safe for concurrent use.
type Bucket struct {
	capacity int64
	window   int64 // time to fill from empty, ns
	debt     int64 // missing tokens × window, at hw; 0 when full
	hw       int64 // latest instant seen (ns): the last refill
	seen     bool
}

// NewBucket returns a full bucket of capacity tokens that an empty bucket refills in w.
// capacity × w must not exceed MaxProduct (New refuses a rule beyond it).
func NewBucket(capacity int, w time.Duration) *Bucket {
	return &Bucket{capacity: int64(capacity), window: int64(w)}
}

// State returns the tokens missing from a full bucket, scaled by the window in nanoseconds
// (so exact), and the instant of the last refill: the form stores keep the bucket in.
func (b *Bucket) State() (debt int64, last time.Time) {
	if !b.seen {
		return b.debt, time.Time{}
	}
	return b.debt, time.Unix(0, b.hw)
}

// SetState puts back what State returned.
func (b *Bucket) SetState(debt int64, last time.Time) {
	b.debt = max(0, debt)
	b.seen = !last.IsZero()
	b.hw = 0
	if b.seen {
		b.hw = last.UnixNano()
	}
}

// Tokens returns the tokens in the bucket at its latest instant, as a fraction (negative after
// monitoring recorded more than it held).
func (b *Bucket) Tokens() float64 {
	return float64(b.capacity) - float64(b.debt)/float64(b.window)
}

// refill moves the bucket's time to t if t is later, adding the tokens the elapsed time
// brings, up to the capacity, and returns the bucket's time.
func (b *Bucket) refill(t int64) int64 {
	if !b.seen {
		b.hw, b.seen = t, true
		return t
	}
	if t <= b.hw {
		return b.hw
	}
	e := t - b.hw
	b.hw = t
	// e·capacity tokens×ns come back; compare before multiplying so nothing overflows.
	if e >= ceilDiv(b.debt, b.capacity) {
		b.debt = 0
	} else {
		b.debt -= e * b.capacity
	}
	return t
}

// Add spends n tokens at instant now (or at the latest instant seen, if later). Monitoring may
// spend more than the bucket holds; the debt is bounded by what refills in strategy.MaxWindow.
func (b *Bucket) Add(now time.Time, n int) {
	b.refill(now.UnixNano())
	b.debt = min(satAdd(b.debt, int64(n), b.window), b.maxDebt())
}

// maxDebt bounds the debt to what refills in strategy.MaxWindow, so that Expiry stays in range
// however much monitoring records.
func (b *Bucket) maxDebt() int64 {
	if b.capacity > math.MaxInt64/int64(strategy.MaxWindow) {
		return math.MaxInt64
	}
	return b.capacity * int64(strategy.MaxWindow)
}

// Remove gives back up to n tokens (a reservation not used), never filling past the capacity.
func (b *Bucket) Remove(at time.Time, n int) {
	b.refill(b.hw)
	if int64(n) >= ceilDiv(b.debt, b.window) {
		b.debt = 0
		return
	}
	b.debt -= int64(n) * b.window
}

// Used returns the tokens missing from a full bucket at now, rounded up: Limit − Used tokens
// can be spent at once.
func (b *Bucket) Used(now time.Time) int {
	b.refill(now.UnixNano())
	return int(min(ceilDiv(b.debt, b.window), math.MaxInt32))
}

// WaitTime returns the smallest d ≥ 0 after which n tokens can be spent leaving at least
// capacity − limit (the rule's headroom) in the bucket, measured from the later of now and the
// latest instant seen.
func (b *Bucket) WaitTime(now time.Time, n, limit int) time.Duration {
	b.refill(now.UnixNano())
	allowed := int64(limit-n) * b.window // most debt at which n still fit
	if b.debt <= allowed {
		return 0
	}
	return time.Duration(ceilDiv(b.debt-allowed, b.capacity))
}

// Shift moves the bucket's last refill by d: the tokens it holds are kept, and it refills from
// the shifted instant, so it is full again exactly d from when it would have been.
func (b *Bucket) Shift(d time.Duration) {
	if b.seen {
		b.hw += int64(d)
	}
}

// Expiry returns the instant the bucket is full again, or the zero time when it is full.
func (b *Bucket) Expiry() time.Time {
	if b.debt == 0 {
		return time.Time{}
	}
	return time.Unix(0, b.hw+ceilDiv(b.debt, b.capacity))
}

// Latest returns the latest instant the bucket has seen, or the zero time.
func (b *Bucket) Latest() time.Time {
	if !b.seen {
		return time.Time{}
	}
	return time.Unix(0, b.hw)
}

// Cost returns the approximate bytes the bucket holds.
func (b *Bucket) Cost() int { return 48 }

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

// satAdd returns a + n·w, saturating at math.MaxInt64.
func satAdd(a, n, w int64) int64 {
	if n > (math.MaxInt64-a)/w {
		return math.MaxInt64
	}
	return a + n*w
}

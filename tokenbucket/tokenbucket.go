// Package tokenbucket is the token-bucket strategy: a bucket of capacity C tokens refilled at
// C/W tokens per second, where a rule's Limit is the capacity and its effective window
// (Window + Margin) the time an empty bucket takes to fill. Each request spends one token; a
// request that finds too few waits for the refill.
//
// The refill is computed from the elapsed time and never exceeds the capacity. The bucket's
// time never moves backwards: an operation dated before the latest instant the bucket has seen
// is applied at that instant, so a late or skewed write spends tokens but cannot refill the
// bucket a second time. The arithmetic is exact (integers, no floating point): the bucket keeps
// its missing tokens multiplied by W in nanoseconds, and waits are rounded up to the
// nanosecond, never early. The package is pure: it reads no clock and holds no lock.
package tokenbucket

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/bucket"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// algorithm is the token-bucket engine.Algorithm.
type algorithm struct{}

// Name returns "tokenbucket".
func (algorithm) Name() string { return "tokenbucket" }

// CounterID identifies the bucket by capacity and effective window (which set the refill rate);
// rules that differ only in headroom share one bucket.
func (algorithm) CounterID(r strategy.Rule) string {
	return "tb:" + strconv.Itoa(r.Limit) + ":" + strconv.FormatInt(int64(r.EffectiveWindow()), 10)
}

// NewCounter returns a full bucket for r.
func (algorithm) NewCounter(r strategy.Rule) engine.Counter {
	return bucket.NewBucket(r.Limit, r.EffectiveWindow())
}

// CheckRule refuses a rule whose Limit × effective window exceeds bucket.MaxProduct.
func (algorithm) CheckRule(r strategy.Rule) error {
	if int64(r.Limit) > bucket.MaxProduct/int64(r.EffectiveWindow()) {
		return fmt.Errorf("%w %s: a token bucket needs limit × window ≤ 2^62 ns; lower the limit or the window",
			strategy.ErrInvalidRule, r)
	}
	return nil
}

// New layers rules under the token bucket, in strategies named "tokenbucket". Errors are
// engine.New's: ErrNoRules, or one wrapping ErrInvalidRule (for limit × window over 2^62 ns too).
func New(rules ...strategy.Rule) (*engine.Strategy, error) {
	return engine.New(algorithm{}, rules...)
}

// Rule returns the rule for a bucket of capacity tokens refilled at ratePerSecond tokens per
// second: Limit = capacity and Window = capacity / ratePerSecond rounded up to the nanosecond
// (so the refill is never faster than asked). Layer it with New, or pass it to
// ratemonitor.WithStrategy through New; ratemonitor.WithRules would make it a rolling window.
// It returns an error wrapping strategy.ErrInvalidRule when capacity < 1, the rate is
// not positive and finite, or the rule is out of range.
func Rule(capacity int, ratePerSecond float64) (strategy.Rule, error) {
	if capacity < 1 || !(ratePerSecond > 0) || math.IsInf(ratePerSecond, 1) {
		return strategy.Rule{}, fmt.Errorf("%w: token bucket capacity %d and refill rate %v per second: want capacity ≥ 1 and a positive rate",
			strategy.ErrInvalidRule, capacity, ratePerSecond)
	}
	// capacity·10⁹/rate, rounded up exactly: rate is a float64, which big.Rat holds exactly, and
	// float division would round twice.
	q := new(big.Rat).SetInt(new(big.Int).Mul(big.NewInt(int64(capacity)), big.NewInt(1e9)))
	q.Quo(q, new(big.Rat).SetFloat64(ratePerSecond))
	num, den := q.Num(), q.Denom()
	wi, rem := new(big.Int).QuoRem(num, den, new(big.Int))
	if rem.Sign() != 0 {
		wi.Add(wi, big.NewInt(1))
	}
	if !wi.IsInt64() || wi.Int64() > int64(strategy.MaxWindow) {
		return strategy.Rule{}, fmt.Errorf("%w: token bucket capacity %d refilled at %v per second takes longer than %v to fill",
			strategy.ErrInvalidRule, capacity, ratePerSecond, strategy.MaxWindow)
	}
	r := strategy.Rule{Limit: capacity, Window: time.Duration(wi.Int64())}
	if _, err := New(r); err != nil {
		return strategy.Rule{}, err
	}
	return r, nil
}

// UsesGranularity reports false: rules need not be whole multiples of a granularity, which this
// algorithm ignores.
func (algorithm) UsesGranularity() bool { return false }

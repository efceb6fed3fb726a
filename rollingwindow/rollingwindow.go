// Package rollingwindow is the rolling-window (sliding-log) strategy: a request
// recorded at instant s counts at instant t if and only if s ≤ t < s+W.
//
// Requests are grouped in time buckets of the rule's granularity g (Rule.Bucket: unset, 1 s for
// windows up to a minute and a sixtieth of a window of whole minutes, 24 min for a day), each
// keeping its count and the latest instant among its requests. A bucket counts until its latest
// request + W (W here is Window+Margin), so a slot is never reported free before s+W for the real
// send instant s, and always by s+W+g: less than one granule late, under 1 s for windows up to a
// minute and under W/60 with the default beyond (after a clock step back, a Shift by part of a
// granule can merge two buckets: up to 2g late). A log holds at most W/g + 1 buckets. The
// package is pure: it reads no clock and holds no lock.
package rollingwindow

import (
	"strconv"

	"github.com/ratemonitor/ratemonitor/internal/rollinglog"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// algorithm is the rolling-window engine.Algorithm.
type algorithm struct{}

// Name returns "rollingwindow".
func (algorithm) Name() string { return "rollingwindow" }

// CounterID identifies the log by effective window and granularity: what is recorded does not
// depend on the limit, so rules that differ only in limit or headroom share one log.
func (algorithm) CounterID(r strategy.Rule) string {
	return "rw:" + strconv.FormatInt(int64(r.EffectiveWindow()), 10) + ":" + strconv.FormatInt(int64(r.Bucket()), 10)
}

// NewCounter returns an empty log for r.
func (algorithm) NewCounter(r strategy.Rule) engine.Counter {
	return rollinglog.NewLog(r.EffectiveWindow(), r.Bucket())
}

// New layers rules under the rolling window, in strategies named "rollingwindow". Errors are
// engine.New's: ErrNoRules, or one wrapping ErrInvalidRule.
func New(rules ...strategy.Rule) (*engine.Strategy, error) {
	return engine.New(algorithm{}, rules...)
}

// Smoothable reports true (see engine.Algorithm): a rolling-window strategy may carry a GCRA
// beside each rule (engine.Strategy.Smoothed).
func (algorithm) Smoothable() bool { return true }

// A rollinglog.Log offers the int64 fast path that strategies take when every counter has it
// (engine.Strategy.Nanos).
var _ interface {
	engine.Counter
	AddNanos(t int64, n int)
	UsedNanos(t int64) int
	WaitNanos(t int64, n, limit int) int64
	LatestNanos() (int64, bool)
} = (*rollinglog.Log)(nil)

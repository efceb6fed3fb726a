// Package fixedwindow is the fixed-window strategy: one counter per aligned window
// [k·W, (k+1)·W) of Unix time (so UTC: a 1 m window starts on the minute, a 24 h window at
// midnight UTC), where W is the rule's effective window (Window + Margin).
//
// Attempts count whether or not they are admitted (CountsRefused, see engine.Algorithm): the
// counter is incremented before it is compared with the limit, as a store that upserts and then
// compares does, so the (limit+1)-th attempt in a window is counted and refused. A refused
// attempt waits for the window's end: Retry-After = window end − now. The package is pure: it
// reads no clock and holds no lock.
package fixedwindow

import (
	"strconv"

	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// algorithm is the fixed-window engine.Algorithm.
type algorithm struct{}

// Name returns "fixedwindow".
func (algorithm) Name() string { return "fixedwindow" }

// CounterID identifies the counter by effective window: rules that differ only in limit or
// headroom count the same attempts.
func (algorithm) CounterID(r strategy.Rule) string {
	return "fw:" + strconv.FormatInt(int64(r.EffectiveWindow()), 10)
}

// NewCounter returns an empty counter for r.
func (algorithm) NewCounter(r strategy.Rule) engine.Counter {
	return fixedcount.NewCounter(r.EffectiveWindow())
}

// CountsRefused reports true: see the package comment.
func (algorithm) CountsRefused() bool { return true }

// New layers rules under the fixed window, in strategies named "fixedwindow". Errors are
// engine.New's: ErrNoRules, or one wrapping ErrInvalidRule. Granularity plays no part in a
// fixed window and is not checked.
func New(rules ...strategy.Rule) (*engine.Strategy, error) {
	return engine.New(algorithm{}, rules...)
}

// UsesGranularity reports false: rules need not be whole multiples of a granularity, which this
// algorithm ignores.
func (algorithm) UsesGranularity() bool { return false }

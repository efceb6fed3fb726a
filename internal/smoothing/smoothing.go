// Package smoothing holds the figures of the GCRA that smooths a rule (engine.Strategy.Smoothed), so
// that package strategy/engine and the Transport's queue bound (minSpan) work them out alike.
package smoothing

import (
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// Burst returns the GCRA burst of rule r: ⌈EffectiveLimit/2⌉.
func Burst(r strategy.Rule) int { return (r.EffectiveLimit() + 1) / 2 }

// Interval returns the GCRA emission interval of rule r: EffectiveWindow /
// (EffectiveLimit − Burst + 1), rounded up to a whole microsecond (never shorter than the
// published rule, so never more permissive).
func Interval(r strategy.Rule) time.Duration {
	k := int64(r.EffectiveLimit()-Burst(r)+1) * int64(time.Microsecond)
	return time.Duration((int64(r.EffectiveWindow())+k-1)/k) * time.Microsecond
}

package engine

import (
	"math"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// Scaled returns the strategy of the same rules, under the same algorithm, with each rule's
// effective limit (Limit − Headroom) multiplied by share and rounded down, but never below 1,
// and no headroom: one process's part of a limit that several share (the Transport's degraded
// mode paces each process on such a strategy while the shared store is unreachable). Windows,
// margins and granularities are kept, so a scaled rule frees its slots exactly when the rule
// does. share must be in (0, 1]; any other value returns s itself. It returns s itself, too,
// when no limit changes.
func (s *Strategy) Scaled(share float64) *Strategy {
	if !(share > 0 && share <= 1) {
		return s
	}
	rules := make([]strategy.Rule, len(s.rules))
	same := true
	for i, r := range s.rules {
		lim := max(1, int(math.Floor(float64(r.EffectiveLimit())*share)))
		same = same && lim == r.Limit && r.Headroom == 0
		r.Limit, r.Headroom = lim, 0
		rules[i] = r
	}
	if same {
		return s
	}
	sc, err := New(s.alg, rules...)
	if err != nil {
		// Unreachable: a lower limit passes every check the rule passed (the token bucket's
		// limit × window bound included).
		return s
	}
	return s.smoothed(sc)
}

package engine

import (
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// RefusedCounter is implemented by algorithms under which an attempt counts whether or not it
// is admitted: the fixed window increments its counter before it checks the limit, as an
// upsert-then-compare store does, so the (limit+1)-th attempt is counted and refused.
type RefusedCounter interface {
	CountsRefused() bool
}

// GranularityUser is implemented by algorithms that may not group requests in time buckets:
// when UsesGranularity reports false (the fixed window, the token bucket), New does not check a
// rule's Granularity against its window, and the algorithm ignores it.
type GranularityUser interface {
	UsesGranularity() bool
}

// RuleChecker is implemented by algorithms that accept fewer rules than Rule.Validate does
// (the token bucket bounds Limit × Window); New calls it for every rule.
type RuleChecker interface {
	CheckRule(r strategy.Rule) error
}

// Admit decides one attempt of n requests, as a server does for each request it receives. The
// attempt is recorded when it fits every rule (Reserve); under an algorithm that counts refused
// attempts (RefusedCounter) it is recorded either way. The decision and every rule's state are
// at the later of now and the latest instant the counters have seen; RetryAfter and each Reset
// are measured from now (see StepTolerance). Errors are CheckBurst's.
func (s *Strategy) Admit(cs []Counter, now time.Time, n int) (strategy.Decision, error) {
	if err := s.CheckBurst(n); err != nil {
		return strategy.Decision{}, err
	}
	at := latest(cs, now)
	d := strategy.Decision{At: at, RetryAfter: s.Wait(cs, at, n)}
	d.Allowed = d.RetryAfter == 0
	if rc, ok := s.alg.(RefusedCounter); d.Allowed || ok && rc.CountsRefused() {
		s.Record(cs, at, n)
		if !d.Allowed {
			// the refused attempt counts too: the next one waits for every rule it filled
			d.RetryAfter = s.Wait(cs, at, n)
		}
	}
	d.Rules = s.States(cs, at)
	// Waits are measured from the caller's instant (see StepTolerance).
	if sk := at.Sub(now); sk > 0 {
		if d.RetryAfter > 0 {
			d.RetryAfter += sk
		}
		for i := range d.Rules {
			if d.Rules[i].Reset > 0 {
				d.Rules[i].Reset += sk
			}
		}
	}
	return d, nil
}

// States returns every rule's state at now, in rule order, changing nothing that counts.
func (s *Strategy) States(cs []Counter, now time.Time) []strategy.RuleState {
	st := make([]strategy.RuleState, len(s.rules))
	for i, r := range s.rules {
		c := cs[s.slotOf[i]]
		used := c.Used(now)
		lim := r.EffectiveLimit()
		st[i] = strategy.RuleState{Rule: r, Used: used, Remaining: max(0, lim-used)}
		if used > 0 {
			st[i].Reset = c.WaitTime(now, lim, lim)
		}
	}
	return st
}

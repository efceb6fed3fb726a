package engine

import (
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// refusedCounter is an Algorithm under which an attempt counts whether or not it is admitted
// (see Algorithm).
type refusedCounter interface {
	CountsRefused() bool
}

// granularityUser is an Algorithm that may not group requests in time buckets (see Algorithm).
type granularityUser interface {
	UsesGranularity() bool
}

// ruleChecker is an Algorithm that accepts fewer rules than Rule.Validate does (see Algorithm).
type ruleChecker interface {
	CheckRule(r strategy.Rule) error
}

// Admit decides one attempt of n requests, as a server does for each request it receives. The
// attempt is recorded when it fits every rule (Reserve); under an algorithm that counts refused
// attempts (CountsRefused, see Algorithm) it is recorded either way. The decision and every rule's state are
// at the later of now and the latest instant the counters have seen; RetryAfter and each Reset
// are measured from now (see StepTolerance). Errors are CheckBurst's.
func (s *Strategy) Admit(cs []Counter, now time.Time, n int) (strategy.Decision, error) {
	if err := s.CheckBurst(n); err != nil {
		return strategy.Decision{}, err
	}
	at := latest(cs, now)
	d := strategy.Decision{At: at, RetryAfter: s.Wait(cs, at, n)}
	d.Allowed = d.RetryAfter == 0
	if rc, ok := s.alg.(refusedCounter); d.Allowed || ok && rc.CountsRefused() {
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

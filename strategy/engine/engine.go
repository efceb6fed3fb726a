package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/rulecheck"
	"github.com/ratemonitor/ratemonitor/internal/smoothing"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// ErrNoRules is returned by New when it is given no rule.
var ErrNoRules = errors.New("strategy needs at least one rule")

// Counter is the state one rule keeps for one key under one algorithm.
//
// A Counter is not safe for concurrent use: stores serialise the operations on a key. Instants
// are passed in; a Counter never reads a clock. Its time never moves backwards: a query dated
// before the latest instant it has seen is answered at that latest instant (the caller's clock
// was read before another caller's, but its turn came after), while records count from their
// own instant whatever order they arrive in.
type Counter interface {
	// Add records n ≥ 1 requests at instant now. A record dated so early that it would no
	// longer count at the latest instant seen counts at that latest instant instead: a record
	// is never dropped because it arrived late or the clock went back (docs/rules.md#window-semantics).
	Add(now time.Time, n int)
	// Remove takes back up to n requests recorded at instant at (a reservation given back);
	// requests that no longer count, or were never recorded at that instant, are not
	// removed. The instants the rest are held until do not move.
	Remove(at time.Time, n int)
	// Used returns how many recorded requests count at instant now. It may drop state that
	// no longer counts, so instants passed to one Counter should not go backwards.
	Used(now time.Time) int
	// WaitTime returns the smallest d ≥ 0 such that, with nothing more recorded,
	// Used(now+d)+n ≤ limit. Callers guarantee 1 ≤ n ≤ limit.
	WaitTime(now time.Time, n, limit int) time.Duration
	// Expiry returns the first instant at which nothing recorded counts any more; the zero
	// time when nothing was ever recorded.
	Expiry() time.Time
	// Latest returns the latest instant the counter has seen, in any operation; the zero
	// time when none.
	Latest() time.Time
	// Cost is the approximate number of bytes the counter holds, for a store's memory bound.
	Cost() int
	// Shift moves every instant the counter holds, its latest instant included, by d
	// (d < 0: earlier), keeping the intervals between them: what Rebase does to a key whose
	// clock was stepped. It does nothing to a counter that has seen no instant.
	Shift(d time.Duration)
}

// Algorithm makes the Counters of one kind of strategy (rolling window, fixed window, …). An
// Algorithm may also have these methods, which the engine looks for:
//
//   - CountsRefused() bool: true when an attempt counts whether or not it is admitted (the fixed
//     window increments its counter before it checks the limit, as an upsert-then-compare store
//     does, so the (limit+1)-th attempt is counted and refused); Admit records it either way.
//   - UsesGranularity() bool: false when the algorithm groups no requests in time buckets (the
//     fixed window, the token bucket): New does not check a rule's Granularity against its window.
//   - CheckRule(strategy.Rule) error: for an algorithm that accepts fewer rules than
//     Rule.Validate does (the token bucket bounds Limit × Window); New calls it for every rule.
//   - Smoothable() bool: true when its strategies may be smoothed (Strategy.Smoothed).
type Algorithm interface {
	// Name is a short lowercase name such as "rollingwindow".
	Name() string
	// CounterID names the counter rule r is kept in. Rules with equal IDs share one counter,
	// so one request counts once in it even when two strategies layer the same window on a
	// key. Stores use the ID as part of the state's address.
	CounterID(r strategy.Rule) string
	// NewCounter returns an empty counter for r.
	NewCounter(r strategy.Rule) Counter
}

// Result is the answer to a reservation.
type Result struct {
	// Allowed is true when the burst fitted in every rule and was recorded.
	Allowed bool
	// Wait is how long until the burst fits in every rule; 0 when Allowed.
	Wait time.Duration
	// At is the instant the burst was recorded at when Allowed: what Release needs to give
	// slots back.
	At time.Time
}

// Strategy layers one or more validated rules on a key under one Algorithm. It is immutable
// and safe for concurrent use; the Counters it works on are not, and must be guarded by the
// store.
//
// Counters are addressed by slot: slot j holds the counter CounterID(j) names. Two rules whose
// counters have the same ID share a slot (one request counts once in it).
type Strategy struct {
	alg     Algorithm
	rules   []strategy.Rule
	slotOf  []int    // rule index -> slot
	ids     []string // slot -> counter ID
	firstOf []int    // slot -> first rule index using it (a GCRA slot: the rule it smooths)
	longest time.Duration
	// smoothFrom is the first GCRA slot (Smoothed), 0 when not smoothed.
	smoothFrom int
	// maxBurst is MaxBurst(), worked out once by New and Smoothed so that CheckBurst, which
	// every reservation runs (twice: the store's check and Reserve's), passes a burst that
	// fits with one comparison. 0 (a Strategy made some other way) only skips that shortcut.
	maxBurst int
	// name is alg.Name(), kept so that Name, which stores ask on their hot paths, makes no
	// interface call.
	name string
	// nano is set by New when every slot's counter is a nanoCounter (see Nanos).
	nano bool
	// lims holds each rule's EffectiveLimit, in rule order, for WaitNanos.
	lims []int
}

// New validates rules and layers them under alg. It returns ErrNoRules for no rules, and an
// error wrapping strategy.ErrInvalidRule for the first invalid one (strategy.Rule.Validate, without the
// granularity checks for an algorithm that does not use it, then the algorithm's own
// CheckRule when it has one).
func New(alg Algorithm, rules ...strategy.Rule) (*Strategy, error) {
	if alg == nil {
		return nil, errors.New("engine.New: nil Algorithm: pass one, or use rollingwindow.New, fixedwindow.New or tokenbucket.New")
	}
	if len(rules) == 0 {
		return nil, ErrNoRules
	}
	s := &Strategy{alg: alg, rules: append([]strategy.Rule(nil), rules...)}
	for i, r := range s.rules {
		if err := validate(alg, r); err != nil {
			return nil, err
		}
		if rc, ok := alg.(ruleChecker); ok {
			if err := rc.CheckRule(r); err != nil {
				return nil, err
			}
		}
		id := alg.CounterID(r)
		slot := -1
		for j, have := range s.ids {
			if have == id {
				slot = j
				break
			}
		}
		if slot < 0 {
			slot = len(s.ids)
			s.ids = append(s.ids, id)
			s.firstOf = append(s.firstOf, i)
		}
		s.slotOf = append(s.slotOf, slot)
		s.longest = max(s.longest, r.EffectiveWindow())
	}
	s.maxBurst = s.MaxBurst()
	s.nano = s.nanoCounters()
	s.name = alg.Name()
	for _, r := range s.rules {
		s.lims = append(s.lims, r.EffectiveLimit())
	}
	return s, nil
}

// validate is Rule.Validate, without the granularity checks for an algorithm that does not use
// it (UsesGranularity, see Algorithm).
func validate(alg Algorithm, r strategy.Rule) error {
	if g, ok := alg.(granularityUser); !ok || g.UsesGranularity() {
		return r.Validate()
	}
	if msg := rulecheck.Base(r.Limit, r.Window, r.Granularity, r.Margin, r.Headroom, strategy.MaxWindow); msg != "" {
		return fmt.Errorf("%w %s: %s", strategy.ErrInvalidRule, r, msg)
	}
	return nil
}

// Name returns the algorithm's name.
func (s *Strategy) Name() string { return s.name }

// Rules returns a copy of the rules, in the order given to New.
func (s *Strategy) Rules() []strategy.Rule { return append([]strategy.Rule(nil), s.rules...) }

// NumRules returns how many rules s layers.
func (s *Strategy) NumRules() int { return len(s.rules) }

// Rule returns rule i, in the order given to New (0 ≤ i < NumRules()), without copying the
// others.
func (s *Strategy) Rule(i int) strategy.Rule { return s.rules[i] }

// Algorithm returns the algorithm s was made with.
func (s *Strategy) Algorithm() Algorithm { return s.alg }

// Slots returns the number of distinct counters a key holds under s.
func (s *Strategy) Slots() int { return len(s.ids) }

// CounterID returns the ID of the counter in slot j (0 ≤ j < Slots()).
func (s *Strategy) CounterID(j int) string { return s.ids[j] }

// SlotOf returns the slot rule i (in the order given to New) is counted in.
func (s *Strategy) SlotOf(i int) int { return s.slotOf[i] }

// SlotRule returns the first rule counted in slot j: its effective window and granularity
// describe the slot's counter, for stores that keep counters in their own form.
func (s *Strategy) SlotRule(j int) strategy.Rule { return s.rules[s.firstOf[j]] }

// NewCounter returns an empty counter for slot j.
func (s *Strategy) NewCounter(j int) Counter {
	if s.smoothFrom > 0 && j >= s.smoothFrom {
		r := s.rules[s.firstOf[j]]
		return newGCRA(smoothing.Interval(r), smoothing.Burst(r))
	}
	return s.alg.NewCounter(s.rules[s.firstOf[j]])
}

// NewCounters returns empty counters for every slot, in slot order.
func (s *Strategy) NewCounters() []Counter {
	cs := make([]Counter, len(s.ids))
	for j := range cs {
		cs[j] = s.NewCounter(j)
	}
	return cs
}

// Longest returns the longest effective window among the rules: after that long without a
// request, a key's state is empty.
func (s *Strategy) Longest() time.Duration { return s.longest }

// MaxBurst returns the largest burst that can ever fit: the smallest effective limit (when
// smoothed, the smallest GCRA burst).
func (s *Strategy) MaxBurst() int {
	m := s.rules[0].EffectiveLimit()
	for _, r := range s.rules[1:] {
		m = min(m, r.EffectiveLimit())
	}
	if s.smoothFrom > 0 {
		for _, r := range s.rules {
			m = min(m, smoothing.Burst(r))
		}
	}
	return m
}

// CheckBurst returns nil when a burst of n can ever fit; otherwise strategy.ErrInvalidBurst (n < 1) or
// an error wrapping strategy.ErrBurstTooLarge that names the rule it can never fit in.
func (s *Strategy) CheckBurst(n int) error {
	if n >= 1 && n <= s.maxBurst {
		return nil // fits every rule (and every GCRA): what the checks below would find
	}
	if n < 1 {
		return fmt.Errorf("%w, got %d", strategy.ErrInvalidBurst, n)
	}
	for _, r := range s.rules {
		if n > r.EffectiveLimit() {
			return fmt.Errorf("%w: a burst of %d can never fit rule %s, which allows %d per window",
				strategy.ErrBurstTooLarge, n, r, r.EffectiveLimit())
		}
	}
	return s.checkSmoothBurst(n)
}

// Record adds n ≥ 1 requests at now to every counter, once each, whatever the limits say
// (monitoring). cs holds one counter per slot.
func (s *Strategy) Record(cs []Counter, now time.Time, n int) {
	for _, c := range cs {
		c.Add(now, n)
	}
}

// Release takes back n requests recorded at instant at, once from each counter: the slots of a
// reservation that were not used (in the spirit of x/time/rate's
// Reservation.Cancel).
func (s *Strategy) Release(cs []Counter, at time.Time, n int) {
	for _, c := range cs {
		c.Remove(at, n)
	}
}

// Wait returns the smallest d ≥ 0 after which a burst of n fits in every rule: the maximum of
// the rules' own waits (each rule's wait only shrinks as time passes, so the maximum is
// where they all hold), and of the GCRAs' when smoothed (Smoothed). n must have passed CheckBurst.
func (s *Strategy) Wait(cs []Counter, now time.Time, n int) time.Duration {
	var d time.Duration
	for i := range s.rules {
		d = max(d, cs[s.slotOf[i]].WaitTime(now, n, s.rules[i].EffectiveLimit()))
	}
	return max(d, s.smoothWait(cs, now, n))
}

// reserve is Reserve without a pause.
func (s *Strategy) reserve(cs []Counter, now time.Time, n int) (Result, error) {
	if err := s.CheckBurst(n); err != nil {
		return Result{}, err
	}
	at := latest(cs, now)
	if d := s.Wait(cs, at, n); d > 0 {
		return Result{Wait: d + at.Sub(now)}, nil
	}
	s.Record(cs, at, n)
	return Result{Allowed: true, At: at}, nil
}

// peek is Peek without what the upstream said.
func (s *Strategy) peek(cs []Counter, now time.Time, n int) (strategy.Snapshot, error) {
	var snap strategy.Snapshot
	if n != 0 {
		if err := s.CheckBurst(n); err != nil {
			return snap, err
		}
		if snap.Wait = s.Wait(cs, now, n); snap.Wait > 0 {
			snap.Wait += skew(cs, now) // measured from now, not the latest instant
		}
	}
	snap.Usage = make([]strategy.Usage, len(s.rules))
	for i, r := range s.rules {
		used := cs[s.slotOf[i]].Used(now)
		snap.Usage[i] = strategy.Usage{Rule: r, Used: used, Remaining: max(0, r.EffectiveLimit()-used)}
	}
	return snap, nil
}

// Expiry returns the instant from which none of cs holds anything that counts.
func Expiry(cs []Counter) time.Time {
	var t time.Time
	for _, c := range cs {
		if e := c.Expiry(); e.After(t) {
			t = e
		}
	}
	return t
}

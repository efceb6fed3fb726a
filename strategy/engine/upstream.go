package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// ErrInvalidUpdate is wrapped when an Update names a rule the strategy does not have or
// carries a negative figure.
var ErrInvalidUpdate = errors.New("invalid upstream update")

// Upstream is what the upstream has said about one key: a pause, and per counter the last
// remaining count it reported. The zero Upstream has said nothing. Like Counters, an Upstream is
// not safe for concurrent use: the store guards it with the key's counters.
type Upstream struct {
	// PausedUntil is the instant before which no reservation on the key is granted (a 429's
	// Retry-After); zero when never paused.
	PausedUntil time.Time
	// PausedAt is the instant the pause was last extended at: an instant the key has seen,
	// which Rebase takes into account (a key paused before anything was recorded on it would
	// otherwise stay paused for as long as the clock was stepped back).
	PausedAt time.Time
	// Reported holds the last figure per counter ID.
	Reported map[string]Reported
}

// Reported is the last remaining count an upstream gave for one counter, and when.
type Reported struct {
	Remaining int
	At        time.Time
}

// Update is what one upstream response says about one key, for Store.Sync.
type Update struct {
	// Pause is how long from the store's instant no reservation may be granted: a 429's
	// Retry-After. 0 leaves any pause as it is; a pause never ends earlier than one set before.
	Pause time.Duration
	// Reports are the figures the response gave, at most one per rule.
	Reports []Report
}

// Report is the upstream's word on one rule.
type Report struct {
	// Rule is the index of the rule, in the order given to New.
	Rule int
	// Remaining is how many requests the upstream says are left, kept for status displays.
	Remaining int
	// Used is the usage the upstream's figure implies (its limit − Remaining): the rule's
	// counter is raised to it when it counts fewer, and never lowered.
	Used int
	// Reset is how long until the upstream frees that usage (IETF t, X-RateLimit-Reset, a
	// 429's Retry-After), or 0 when it did not say. The requests a raise adds are dated so
	// that they stop counting then; without a Reset they are dated at the instant of the
	// Sync, and so held for a whole window, since nothing says when the upstream's own ones
	// were made.
	Reset time.Duration
	// Fixed says the upstream counts the rule in fixed windows (see fixedReport): its reset
	// frees everything the rule's counter holds, and a figure after a used-up one without a
	// reset means its window has turned.
	Fixed bool
}

// CheckUpdate returns an error wrapping ErrInvalidUpdate when u has a pause or a reset that is
// negative or longer than MaxWindow, names a rule out of range, or carries a negative or too
// large (over 2^31) figure.
func (s *Strategy) CheckUpdate(u Update) error {
	if u.Pause < 0 || u.Pause > strategy.MaxWindow {
		return fmt.Errorf("%w: pause %v, want 0 to %v", ErrInvalidUpdate, u.Pause, strategy.MaxWindow)
	}
	for _, r := range u.Reports {
		if r.Reset < 0 || r.Reset > strategy.MaxWindow {
			return fmt.Errorf("%w: reset %v, want 0 to %v", ErrInvalidUpdate, r.Reset, strategy.MaxWindow)
		}
	}
	for _, r := range u.Reports {
		if r.Rule < 0 || r.Rule >= len(s.rules) {
			return fmt.Errorf("%w: rule %d, want 0 to %d", ErrInvalidUpdate, r.Rule, len(s.rules)-1)
		}
		if r.Remaining < 0 || r.Used < 0 || r.Remaining > 1<<31 || r.Used > 1<<31 {
			return fmt.Errorf("%w: rule %s: remaining %d and used %d must be from 0 to 2^31",
				ErrInvalidUpdate, s.rules[r.Rule], r.Remaining, r.Used)
		}
	}
	return nil
}

// Sync applies u to a key's counters and upstream state at the later of now and the counters'
// latest instant, and returns that instant: the pause is extended to that instant + u.Pause,
// each reported rule's counter is raised to Used by recording the difference (dated by
// Report.Reset: see raisedAt), and the figures are kept in up.Reported. u must have passed
// CheckUpdate.
func (s *Strategy) Sync(cs []Counter, up *Upstream, now time.Time, u Update) time.Time {
	now = latest(cs, now)
	paused := up.PausedUntil.After(now) // before this update: see fixedReport
	if u.Pause > 0 {
		if until := now.Add(u.Pause); until.After(up.PausedUntil) {
			up.PausedUntil, up.PausedAt = until, now
		}
	}
	for _, r := range u.Reports {
		slot := s.slotOf[r.Rule]
		c := cs[slot]
		if r.Fixed {
			s.fixedReport(c, up, slot, now, r, paused)
		}
		if used := c.Used(now); used < r.Used {
			c.Add(raisedAt(now, r.Reset, s.SlotRule(slot).EffectiveWindow()), r.Used-used)
		}
		if up.Reported == nil {
			up.Reported = map[string]Reported{}
		}
		up.Reported[s.ids[s.slotOf[r.Rule]]] = Reported{Remaining: r.Remaining, At: now}
	}
	return now
}

// raisedAt is the instant the requests a raise adds are recorded at, for a Sync at now whose
// report frees them after reset, in a counter whose window (with margin) is w: now + reset − w,
// so that they stop counting at now + reset, when 0 < reset < w; now otherwise.
func raisedAt(now time.Time, reset, w time.Duration) time.Time {
	if reset > 0 && reset < w {
		return now.Add(reset - w)
	}
	return now
}

// Reserve records n if the burst fits in every rule now, and otherwise records nothing and
// says how long until it fits. It is the pacing primitive; the store makes it atomic. The
// decision and the record are both at the later of now and the latest instant the counters have
// seen, which Result.At reports; the wait is measured from now, the caller's instant, so that
// sleeping it is enough (see StepTolerance). While up (which may be nil) is paused at the
// decision's instant nothing is recorded, and the wait is at least the rest of the pause.
// Errors are CheckBurst's.
func (s *Strategy) Reserve(cs []Counter, up *Upstream, now time.Time, n int) (Result, error) {
	if up == nil || !up.PausedUntil.After(now) {
		// Not paused now; the decision's instant can only be later than now.
		return s.reserve(cs, now, n)
	}
	if err := s.CheckBurst(n); err != nil {
		return Result{}, err
	}
	at := latest(cs, now)
	if p := up.PausedUntil.Sub(at); p > 0 {
		return Result{Wait: max(p, s.Wait(cs, at, n)) + at.Sub(now)}, nil
	}
	return s.reserve(cs, now, n)
}

// Peek reports usage per rule and, for n ≥ 1, the wait for a burst of n (measured from now, as
// Reserve's), changing nothing that counts. n == 0 asks for usage only. With what the upstream
// said (up, which may be nil), the wait for n ≥ 1 is at least the rest of the pause,
// strategy.Snapshot.PausedUntil is set while the pause lasts, and each rule's usage carries the
// last figure reported for its counter while it is less than a window old (a figure about a
// window that has passed says nothing any more). Errors are CheckBurst's for n ≠ 0.
func (s *Strategy) Peek(cs []Counter, up *Upstream, now time.Time, n int) (strategy.Snapshot, error) {
	snap, err := s.peek(cs, now, n)
	if err != nil || up == nil {
		return snap, err
	}
	if up.PausedUntil.After(now) {
		snap.PausedUntil = up.PausedUntil
		if n != 0 {
			snap.Wait = max(snap.Wait, up.PausedUntil.Sub(now))
		}
	}
	for i := range snap.Usage {
		slot := s.slotOf[i]
		if r, ok := up.Reported[s.ids[slot]]; ok && now.Before(r.At.Add(s.SlotRule(slot).EffectiveWindow())) {
			snap.Usage[i].Reported, snap.Usage[i].ReportedAt = r.Remaining, r.At
		}
	}
	return snap, nil
}

// latest returns the later of now and the latest instant any of cs has seen.
func latest(cs []Counter, now time.Time) time.Time {
	for _, c := range cs {
		if l := c.Latest(); l.After(now) {
			now = l
		}
	}
	return now
}

package engine

import "time"

// StepTolerance is how far a store's clock may read behind the latest instant a key has seen
// before the store treats the difference as a clock step (Rebase) rather than as ordinary
// skew: 1 s.
//
// Within it (two processes whose clocks differ a little, a clock read just before another
// caller's turn), operations are answered at the key's latest instant, and every wait they
// return is measured from the caller's own instant (the wait at the latest instant plus the
// skew), so that sleeping it on the store's clock is enough: a wait told is then at most the
// longest window + pause + StepTolerance. Beyond it, the key's state is rebased on the new
// clock. Hosts that share a store (DynamoDB) must keep their clocks within StepTolerance of
// each other (NTP does): a host further behind would rebase the key on every operation it
// makes, and each rebase shifts the key's older records back too, so in the other hosts'
// terms they would be released early.
const StepTolerance = time.Second

// Rebase prepares a key's state for an operation at the store's instant now. When now is
// behind the latest instant cs have seen by more than StepTolerance, the store's clock was
// stepped back (an NTP step, a manual change, an injected clock): every counter is shifted
// back by the difference (Counter.Shift), and so are the pause and report instants of up
// (which may be nil), so that the key's latest instant becomes now and every interval is kept.
// Nothing then admits more than it would have without the step, every wait told on the new
// clock is the wait got, and no key is locked out until the clock catches up. It returns the
// shift applied (≤ 0), or 0 when now is not that far behind.
//
// A step forward needs nothing: the key's state simply expires, as after a long idle time.
// Stores call Rebase with all of a key's counters, before the operation, under the key's lock.
// A Reserve's Result.At from before a rebase no longer names the instant its requests are held
// at: releasing it finds nothing, so those slots are held until they expire (never early).
func Rebase(cs []Counter, up *Upstream, now time.Time) time.Duration {
	seen := latest(cs, now)
	if up != nil {
		// What the upstream said was said at instants the key has seen, too: a key paused
		// before anything was recorded on it is rebased like any other.
		if up.PausedAt.After(seen) {
			seen = up.PausedAt
		}
		for _, r := range up.Reported {
			if r.At.After(seen) {
				seen = r.At
			}
		}
	}
	skew := seen.Sub(now)
	if skew <= StepTolerance {
		return 0
	}
	d := -skew
	for _, c := range cs {
		c.Shift(d)
	}
	if up != nil {
		if !up.PausedUntil.IsZero() {
			up.PausedUntil = up.PausedUntil.Add(d)
		}
		if !up.PausedAt.IsZero() {
			up.PausedAt = up.PausedAt.Add(d)
		}
		for id, r := range up.Reported {
			r.At = r.At.Add(d)
			up.Reported[id] = r
		}
	}
	return d
}

// skew is how far the latest instant cs have seen is ahead of now (0 when it is not): what a
// wait measured at the latest instant lacks to be long enough on the caller's clock.
func skew(cs []Counter, now time.Time) time.Duration {
	return latest(cs, now).Sub(now)
}

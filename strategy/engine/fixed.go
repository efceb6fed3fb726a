package engine

import "time"

// capper is a Counter that can end what it holds early (rollinglog.Log): the rolling window's.
// Counters without it (a GCRA, the fixed window's, the token bucket's) ignore Report.Fixed.
type capper interface {
	// Cap makes every request held stop counting at until at the latest; with until at or
	// before the counter's latest instant, it holds nothing.
	Cap(until time.Time)
}

// fixedReport applies a Fixed report r on the counter c of slot, at the Sync's instant now,
// before the usual raise to r.Used (paused: whether the key was paused before this update):
//
//   - with a reset, everything c holds stops counting at now + r.Reset at the latest: the
//     upstream frees its whole window then, however long our rolling window would hold it;
//   - without one, c is set to r.Used (emptied here, raised after) when r says the rule is used
//     up (Remaining 0: the caller asks for a probe, see ratemonitor's SyncConfig.Fixed), or when
//     the last figure reported for c was 0, c holds the rule's limit and the key is not
//     paused: in a fixed window the remaining count only grows when the window turns, so the
//     requests we hold were the old window's. A figure read during a pause is not taken as a
//     turn: it may be an answer to a request sent before the window was used up, read late.
func (s *Strategy) fixedReport(c Counter, up *Upstream, slot int, now time.Time, r Report, paused bool) {
	cp, ok := c.(capper)
	if !ok {
		return
	}
	// Bring c to now first: a bucket that stopped counting before now but is not pruned yet
	// would otherwise be merged into a capped one and count again until the cap.
	c.Used(now)
	if r.Reset > 0 {
		if r.Reset < s.SlotRule(slot).EffectiveWindow() {
			cp.Cap(now.Add(r.Reset))
		}
		return
	}
	last, had := up.Reported[s.ids[slot]]
	if r.Remaining == 0 || (had && last.Remaining == 0 && r.Remaining > 0 && !paused &&
		c.Used(now) >= s.rules[r.Rule].EffectiveLimit()) {
		cp.Cap(now)
	}
}

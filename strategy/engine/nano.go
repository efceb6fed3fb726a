package engine

import "time"

// nanoCounter is a Counter that also takes its instants as Unix nanoseconds, so that a store's
// hot path builds and reads no time.Time. Each method answers exactly as its time.Time twin
// would at time.Unix(0, t): AddNanos is Add, UsedNanos is Used, WaitNanos is WaitTime (in ns),
// and LatestNanos is Latest().UnixNano() with true, or 0 and false when the counter has seen
// no instant. rollinglog.Log implements it.
type nanoCounter interface {
	Counter
	AddNanos(t int64, n int)
	UsedNanos(t int64) int
	WaitNanos(t int64, n, limit int) int64
	LatestNanos() (int64, bool)
}

// Nanos reports whether s's operations may be run on instants in Unix nanoseconds
// (RecordNanos, WaitNanos, ReserveNanos): s is not smoothed and every counter its algorithm
// makes for its slots has AddNanos, UsedNanos, WaitNanos and LatestNanos (the rolling window's
// do). It is worked out once, by New.
func (s *Strategy) Nanos() bool { return s.nano && s.smoothFrom == 0 }

// nanoCounters reports whether alg makes a nanoCounter for every slot of s (New).
func (s *Strategy) nanoCounters() bool {
	for j := range s.ids {
		if _, ok := s.alg.NewCounter(s.rules[s.firstOf[j]]).(nanoCounter); !ok {
			return false
		}
	}
	return true
}

// RecordNanos is Record at now, Unix ns. s.Nanos() must be true and cs must be counters made
// for s's slots (so that each has the Unix-ns methods).
func (s *Strategy) RecordNanos(cs []Counter, now int64, n int) {
	for _, c := range cs {
		c.(nanoCounter).AddNanos(now, n)
	}
}

// WaitNanos is Wait at now, Unix ns, in ns. s.Nanos() must be true and n must have passed
// CheckBurst.
func (s *Strategy) WaitNanos(cs []Counter, now int64, n int) int64 {
	var d int64
	for i, j := range s.slotOf {
		d = max(d, cs[j].(nanoCounter).WaitNanos(now, n, s.lims[i]))
	}
	return d
}

// UsedNanos is Used of slot j's counter at now, Unix ns. s.Nanos() must be true.
func (s *Strategy) UsedNanos(cs []Counter, j int, now int64) int {
	return cs[j].(nanoCounter).UsedNanos(now)
}

// ReserveNanos is Reserve at now, Unix ns, for a burst n that passed CheckBurst; s.Nanos() must
// be true. It reports whether the burst was recorded, the wait (measured from now, as
// Reserve's; 0 when recorded) and the instant of the decision, ns: the later of now and the
// latest instant the counters have seen, at which the burst was recorded (Reserve's Result.At,
// which is its now itself when at == now).
func (s *Strategy) ReserveNanos(cs []Counter, now int64, n int) (ok bool, wait time.Duration, at int64) {
	if len(cs) == 1 && len(s.lims) == 1 {
		// One rule in one slot, the usual key: one type assertion, one pass.
		c := cs[0].(nanoCounter)
		at = now
		if l, seen := c.LatestNanos(); seen && l > at {
			at = l
		}
		if d := c.WaitNanos(at, n, s.lims[0]); d > 0 {
			return false, time.Duration(d + (at - now)), at
		}
		c.AddNanos(at, n)
		return true, 0, at
	}
	at = now
	for _, c := range cs {
		if l, seen := c.(nanoCounter).LatestNanos(); seen && l > at {
			at = l
		}
	}
	if d := s.WaitNanos(cs, at, n); d > 0 {
		return false, time.Duration(d + (at - now)), at
	}
	for _, c := range cs {
		c.(nanoCounter).AddNanos(at, n)
	}
	return true, 0, at
}

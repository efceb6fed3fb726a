package degrade

import (
	"fmt"
	"time"
)

// A master change behind a Sentinel client, met by the degraded mode (issue 14): Redis
// replicates asynchronously, and from the replica's promotion until a process's client learns
// of it (the sentinels' +switch-master, up to a second later: they poll the promoted replica's
// INFO every second), every process may still be granted slots by the old master, which the
// new one never sees; those writes are lost when the old master is made a replica. Measured
// with four paced processes at 20 per second across a SENTINEL FAILOVER: 39 grants in one
// second. So a process that meets a new master goes degraded as for an outage: the grant the
// new master just made is not used (it stays counted there, an over-count), nothing is granted
// until the hold-back (the longest window) from then has passed, by which time the old
// master's grants have aged out, and the shared store is not probed before that either, since
// the settling after a probe has no hold-back. A probe that meets a new master after an outage
// (a master killed) waits likewise until the longest window from the outage's start. The
// guarantee assumes the fleet's processes learn of the change within a rule's margin of each
// other (each hears it from its own sentinel, which may learn it later, by their hello
// messages every 2 s); when they learn further apart, a window may hold up to twice the
// limit: the old master's grants to the processes still unaware, and those made after the
// first one's hold-back (docs/fleet.md).

// sentinelStore is a store that names the master it last reached behind a Sentinel client
// (redisstore.Store.SentinelMaster), "" when it cannot tell.
type sentinelStore interface{ SentinelMaster() string }

// masterChangedError is the error of the Degraded event for a master change.
type masterChangedError struct{ from, to string }

func (e masterChangedError) Error() string {
	return fmt.Sprintf("ratemonitor: the Redis master changed from %s to %s (Sentinel failover): grants the old master made after the promotion may be lost (asynchronous replication), so this process paces locally until they have aged out", e.from, e.to)
}

// answer is what an operation does with a healthy (or settling) shared-store answer, once
// masterChange has looked at the master behind it.
type answer int

const (
	useAnswer   answer = iota // no master change: the answer stands
	fencedNow                 // a new master: the Store is degraded (fenced) from now on
	staleAnswer               // the operation started before a switch of the stores: try again
)

// masterChange notes the shared store's current master after an operation that saw at (mode)
// has had its answer, and says what to do with that answer:
//   - fencedNow when the master changed since the last one noted, or since the operation
//     started: the Store goes degraded at once, in the same critical section as the
//     noting (an operation starting between the two would otherwise take healthy mode and use
//     the new master's grant), with no probe before the hold-back; the answer is not used (a
//     grant stays counted on the new master, an over-count).
//   - staleAnswer when the operation started in an earlier generation (an outage, a return or
//     a fence came while it was under way) and the switch since has accounted for the master
//     it answers from: what this operation knew is out of date, so it goes round again in the
//     current state (a grant stays counted, unused). Only the first operation to finish on a
//     new master sees the change; the others already under way (a dozen callers a process)
//     are caught here, since that first one's fence switched the generation (21 grants in a
//     second in the fleet test before), and an answer that outlived a whole outage does not
//     degrade the Store again.
//   - useAnswer otherwise (no Sentinel store, first sight, no change).
//
// Call without d.mu.
func (d *Store) masterChange(at seen, start time.Time) answer {
	if d.sentinel == nil {
		return useAnswer
	}
	cur := d.sentinel.SentinelMaster()
	d.mu.Lock()
	stale := d.gen.Load() != at.gen
	var moved error
	switch prev := d.master; {
	case cur != "" && cur != prev:
		d.master = cur
		if prev != "" {
			moved = masterChangedError{from: prev, to: cur}
		}
	case cur != "" && at.master != "" && at.master != cur && !stale:
		moved = masterChangedError{from: at.master, to: cur}
	}
	if moved == nil {
		d.mu.Unlock()
		if stale {
			return staleAnswer
		}
		return useAnswer
	}
	share, begun := d.failLocked(start)
	d.nextProbe = later(d.nextProbe, d.since.Add(d.cfg.Longest))
	d.mu.Unlock()
	if begun {
		d.reportDegraded(moved, share)
	}
	return fencedNow
}

// noteMaster notes the shared store's current master for a probe and reports whether it
// changed since the last one noted. (Calls begun before the outage are caught by their
// generation in masterChange.)
func (d *Store) noteMaster() bool {
	if d.sentinel == nil {
		return false
	}
	cur := d.sentinel.SentinelMaster()
	d.mu.Lock()
	defer d.mu.Unlock()
	prev := d.master
	if cur == "" || cur == prev {
		return false
	}
	d.master = cur
	return prev != ""
}

// probeTooSoon reports whether a probe that succeeded, having met a new master, comes before
// the longest window from the outage's start has passed; then it ends the probe and sets
// the next one at that instant.
func (d *Store) probeTooSoon() bool {
	if !d.noteMaster() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	until := d.since.Add(d.cfg.Longest)
	if !d.clock.Now().Before(until) {
		return false
	}
	d.probing = false
	d.nextProbe = until
	return true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

package ratemonitor

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

// masterChange notes the shared store's current master, after an operation that saw before
// noted (degrader.mode) has had its answer, and reports a change since the last one noted, or
// nil (no Sentinel store, first sight, no change). It reports a change too when another
// operation noted the current master while this one was under way: the Transport's callers
// share the store's client, so this operation's answer may be the new master's as well (a
// grant made without the old master's last ones); only the first to finish would see the
// change otherwise, and under load, with a dozen callers a process, the others' grants were
// used at once (21 in a second in the fleet test, limit 20). Call without d.mu.
func (d *degrader) masterChange(before string) error {
	if d.sentinel == nil {
		return nil
	}
	cur := d.sentinel.SentinelMaster()
	d.mu.Lock()
	defer d.mu.Unlock()
	prev := d.master
	switch {
	case cur == "":
		return nil
	case cur != prev:
		d.master = cur
		if prev == "" {
			return nil
		}
		return masterChangedError{from: prev, to: cur}
	case before != "" && before != cur:
		return masterChangedError{from: before, to: cur}
	}
	return nil
}

// fenced is what a healthy operation that met a new master does: degraded (see fail), with
// no probe before the hold-back has passed.
func (d *degrader) fenced(err error, start time.Time) {
	d.fail(err, start)
	d.mu.Lock()
	d.nextProbe = later(d.nextProbe, d.since.Add(d.longest))
	d.mu.Unlock()
}

// probeTooSoon reports whether a probe that succeeded, having met a new master, comes before
// the longest window from the outage's start has passed; then it ends the probe and sets
// the next one at that instant.
func (d *degrader) probeTooSoon() bool {
	if d.masterChange("") == nil { // one probe at a time, and no other shared-store call while degraded
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	until := d.since.Add(d.longest)
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

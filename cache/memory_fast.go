package cache

import (
	"time"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// fastGrant runs a Record or a Reserve of o.n on e under its base strategy when the entry's
// own state settles everything update would otherwise work out around the counters: the key is
// held in ristretto (not pinned), has no repeated refusal under way (flags), was found with room
// for more than o.n requests under every rule of base (entry.room), and is not dated behind its
// latest instant. A key with room is neither paused nor before its limitUntil, and base is the
// strategy last used on it: room is counted only under base, after atLimitNs has found neither,
// and a Sync (which sets a pause) or another strategy's operation forgets it
// (TestFastGrantMatchesGeneral checks this after every operation). So applyAt's rebase,
// catch-up and countersFor have nothing to do; a Reserve is answered as Strategy.Reserve would
// without a pause (figures reported by Sync are in the counters already); and after
// the operation has spent at most o.n of the room at least one request still fits, so
// atLimitNs would answer false without reading the counters, and nothing moves between the
// tiers. What is left is the operation itself, the room, the cost (returned, for refresh) and
// the sampled Get: the same state as update's general path leaves (TestFastGrantMatchesGeneral),
// with fewer steps under the key's lock, which on a hot key shared by goroutines is what bounds
// them (BenchmarkMemoryVsRate).
//
// It reports ok false, having done nothing, when any condition fails. The caller holds e.mu, has
// checked e.evicted and m.closed, and dates the operation at now (ns: now.UnixNano()).
func (m *Memory) fastGrant(s *engine.Strategy, e *entry, o *op, now time.Time, ns int64) (cost int, refresh, sample, ok bool) {
	if m.general || o.kind == 0 || s != e.base || e.flags&(refusing|skipped) != 0 || e.pinned ||
		int(e.room) <= o.n || ns < e.hw || !s.Nanos() {
		return 0, false, false, false
	}
	cs := e.counters[:s.Slots()]
	if o.kind == opRecord {
		s.RecordNanos(cs, ns, o.n)
	} else {
		reserveNanos(s, cs, o, now, ns)
	}
	e.hw = ns
	e.spend(s, o)
	cost, refresh = e.maintain(s, now)
	e.hits++
	if m.fastHits != nil {
		m.fastHits.Add(1)
	}
	return cost, refresh, e.hits%getSample == 0, true
}

package cache

import (
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// entryLog and entryLogs are an entry made together with its counters when they are
// rolling-window logs (the default strategy) of one slot or two (a minute rule and a day rule,
// as Xero's): one allocation instead of two or four, and the logs beside the lock and the
// index's key, so an operation on a key that is not in the CPU's cache misses fewer objects.
// Each is a size class of its own, 208 and 320 bytes: they hold exactly the bytes the separate
// objects held (the entry 128, a log 80, a slice of two counters 32), and heapCost's figures
// stay true (TestEntryLogSizes).
type entryLog struct {
	entry
	log rollingwindow.Log
}

type entryLogs struct {
	entry
	cs   [2]engine.Counter
	logs [2]rollingwindow.Log
}

// newEntry returns a new entry for key (hash h), whose first counters will be s's. When s is
// an unsmoothed rolling-window strategy of one or two slots, its logs are made inside the entry
// and the entry's base is s already; otherwise countersFor makes the counters on first use.
func newEntry(key string, h uint32, s *engine.Strategy) *entry {
	if s == nil || s.Slots() > 2 || !refusable(s) { // refusable: unsmoothed rolling window
		return &entry{key: key, hash: h}
	}
	if s.Slots() == 1 {
		el := &entryLog{entry: entry{key: key, hash: h, base: s}}
		r := s.SlotRule(0)
		el.log.Init(r.EffectiveWindow(), r.Bucket())
		el.inline[0] = &el.log
		el.counters = el.inline[:1:1]
		return &el.entry
	}
	el := &entryLogs{entry: entry{key: key, hash: h, base: s, flags: fused}}
	for j := range el.logs {
		r := s.SlotRule(j)
		el.logs[j].Init(r.EffectiveWindow(), r.Bucket())
		el.cs[j] = &el.logs[j]
	}
	el.counters = el.cs[:]
	return &el.entry
}

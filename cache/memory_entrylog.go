package cache

import (
	"unsafe"

	"github.com/ratemonitor/ratemonitor/internal/rollinglog"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// entryLog and entryLogs are an entry made together with its counters when they are
// rolling-window logs (the default strategy) of one slot or two (a minute rule and a day rule,
// as Xero's), with the first ring of each log (logBuf buckets, Log.InitBuffer): one allocation
// instead of three or six, and the logs and their newest buckets beside the lock and the
// index's key, so an operation on a key that is not in the CPU's cache misses fewer objects.
// Each is a size class of its own, 240 and 384 bytes: they hold exactly the bytes the separate
// objects held (the entry 128, a log 80 and its first ring of 4 buckets 32, a slice of two
// counters 32), and heapCost's figures stay true (TestFusedEntriesAreSizeClasses). A log that outgrows its
// buffer leaves it idle in the object: heapCost counts it then (idleBufBytes).
type entryLog struct {
	entry
	log rollinglog.Log
	buf [logBuf]uint64
}

type entryLogs struct {
	entry
	cs   [2]engine.Counter
	logs [2]rollinglog.Log
	bufs [2][logBuf]uint64
}

// logBuf is how many buckets (8 bytes each) of a fused log's first ring its entry holds: four,
// the smallest ring a log makes, which holds a key's steady traffic of a few requests a window.
const logBuf = 4

// newEntry returns a new entry for key (hash h), whose first counters will be s's. When s is
// an unsmoothed rolling-window strategy of one or two slots, its logs are made inside the entry
// and the entry's base is s already; otherwise countersFor makes the counters on first use.
func newEntry(key string, h uint32, s *engine.Strategy) *entry {
	if s == nil || s.Slots() > 2 || !refusable(s) { // refusable: unsmoothed rolling window
		return &entry{key: key, hash: h}
	}
	if s.Slots() == 1 {
		el := &entryLog{entry: entry{key: key, hash: h, base: s, flags: oneLog}}
		r := s.SlotRule(0)
		el.log.InitBuffer(r.EffectiveWindow(), r.Bucket(), el.buf[:])
		el.inline[0] = &el.log
		el.counters = el.inline[:1:1]
		return &el.entry
	}
	el := &entryLogs{entry: entry{key: key, hash: h, base: s, flags: fused}}
	for j := range el.logs {
		r := s.SlotRule(j)
		el.logs[j].InitBuffer(r.EffectiveWindow(), r.Bucket(), el.bufs[j][:])
		el.cs[j] = &el.logs[j]
	}
	el.counters = el.cs[:]
	return &el.entry
}

// idleBufBytes is the bytes of a fused entry's log buffers (logBuf) that their logs have left
// for rings of their own: still part of the entry's object, and no longer in the logs' Cost.
// The caller holds e.mu (or e is not yet shared).
func (e *entry) idleBufBytes() int {
	idle := 0
	switch {
	case e.flags&fused != 0: // made as an entryLogs (newEntry)
		el := (*entryLogs)(unsafe.Pointer(e))
		for j := range el.logs {
			if !el.logs[j].InBuffer(el.bufs[j][:]) {
				idle += logBuf * 8
			}
		}
	case e.flags&oneLog != 0: // made as an entryLog
		el := (*entryLog)(unsafe.Pointer(e))
		if !el.log.InBuffer(el.buf[:]) {
			idle += logBuf * 8
		}
	}
	return idle
}

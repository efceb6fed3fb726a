package cache

import "unsafe"

// entryOverhead is the heap a key holds in the memory store besides its key's bytes, its slots
// and its counters' own Cost: the entry struct, ristretto's item in its sharded store map and
// in its policy's cost map, with the spare room of those maps. Measured (runtime.ReadMemStats
// after runtime.GC, Go 1.26, ristretto v2.4.2) for a key with one minute rule and a few
// requests, charged 712 bytes: 618 bytes per key for 10 000 keys written once
// (TestCostMatchesHeap), about 707 per key held in a 1 000 000-key flood of the default 64 MiB,
// where churn leaves ristretto's maps emptier (TestFlood -flood). The charge sits between the
// two, nearer the flood's, since that is when MaxCost binds. (472 since an entry keeps the
// instant it was last found at its limit and its pause's start: 32 bytes more than the 440 of
// before.)
const entryOverhead = 472

// slotOverhead is the heap each slot (counter) of a key adds beyond the counter's own Cost:
// its ID, its place in the entry's counter slice and in the slot-order scratch slice.
const slotOverhead = int(2*unsafe.Sizeof(any(nil)) + unsafe.Sizeof(""))

// heapCost is the cost charged for e: what it really holds on the heap, in bytes. The caller
// holds e.mu (or e is not yet shared).
func (e *entry) heapCost() int {
	cost := entryOverhead + (len(e.key)+7)&^7 + slotOverhead*len(e.counters)
	for _, c := range e.counters {
		cost += c.Cost()
	}
	return cost
}

package cache

import (
	"math"
	"unsafe"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// entryOverhead is the heap a key holds in the memory store besides its key's bytes, its
// counters' slots and their own Cost: the entry struct (128 bytes), its share of its shard's
// index (8 bytes a slot, 1.3 to 8 slots a key: about 21 bytes), ristretto's item in its sharded
// store map and in its policy's cost map, with the spare room of those maps. Measured
// (runtime.ReadMemStats after runtime.GC, Go 1.26, ristretto v2.4.2) for a key with one minute
// rule and a few requests, charged 584 bytes: 506 bytes per key for 10 000 keys written once
// (TestCostMatchesHeap), about 582 per key held in a 1 000 000-key flood of the default 64 MiB,
// where churn leaves ristretto's maps emptier (TestFloodStaysWithinMaxCost -flood).
// The charge sits between the two, nearer the flood's, since that is when MaxCost binds. (It
// was 472 with the entry of before: 224 bytes, and a slice of counter IDs and one of counters
// in slot order besides its counters.)
const entryOverhead = 376

// counterSlot is the heap each slot (counter) of a key adds beyond the counter's own Cost: its
// place in the entry's counter slice.
const counterSlot = int(unsafe.Sizeof(engine.Counter(nil)))

// moreOverhead is the heap of an entryMore (a key used by a second strategy whose slots are in
// another order, paused, or given figures by Sync), besides its slices and map.
const moreOverhead = int(unsafe.Sizeof(entryMore{}))

// reportedBytes is the heap of an Upstream's Reported map of n figures: the map's header and
// one group of 8 slots (a counter ID and a Reported each) per 8 figures.
func reportedBytes(n int) int {
	slot := int(unsafe.Sizeof("") + unsafe.Sizeof(engine.Reported{}))
	return 48 + (n+7)/8*(8+8*slot)
}

// heapCost is the cost charged for e: what it really holds on the heap, in bytes. The caller
// holds e.mu (or e is not yet shared).
func (e *entry) heapCost() int {
	cost := entryOverhead + (len(e.key)+7)&^7
	if len(e.counters) > 1 || len(e.counters) == 1 && &e.counters[0] != &e.inline[0] {
		cost += counterSlot * cap(e.counters) // a slice of its own, not inline
	}
	if e.flags&fused != 0 && cap(e.counters) != 2 {
		cost += 2 * counterSlot // the entryLogs's own array, left behind by an append
	}
	cost += e.idleBufBytes()
	for _, c := range e.counters {
		cost += c.Cost()
	}
	if x := e.more; x != nil {
		cost += moreOverhead + int(unsafe.Sizeof(""))*cap(x.ids) + counterSlot*cap(x.scratch)
		if x.up.Reported != nil {
			cost += reportedBytes(len(x.up.Reported))
		}
	}
	return min(cost, math.MaxInt32) // entry.cost is an int32: a key of 2 GiB is charged 2 GiB
}

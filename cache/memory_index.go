package cache

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// The index maps every key held in either tier to its entry, so that an operation on a key the
// store already holds finds its entry without ristretto (whose Get takes a shard lock and
// pushes to its frequency buffers) and without life: one hash, a few atomic loads, the entry's
// own lock.
//
// Each shard has one open-addressing table of entry pointers, probed linearly from the key's
// hash. Readers load the table and its slots atomically and take no lock. Writers hold the
// shard's index lock, a leaf lock (nothing else is taken while it is held), so that ristretto's
// OnEvict, which may run while an admission holds the shard's lock, can delete from it. A
// deleted slot holds a tombstone so that probes for keys past it go on; the table is rebuilt
// (into a new table, swapped in atomically) when live entries and tombstones fill 3/4 of it,
// or when live entries fill less than 1/8 of it (a flood has passed), so it holds 1.3 to 8
// slots (8 bytes each) per key, about 2.7 after a rebuild. A reader still on the old table
// finds the entries it held, and misses the newer ones: a miss goes to the slow path, which
// looks again under the shard's lock.
//
// The index says where a key's entry is, not whether it is live: an entry found is used only
// after its evicted flag, read under its lock, is false. An entry is put in the index by its
// admission and taken out by whatever sets its evicted flag, both under the entry's lock, so
// that an entry evicted before its admission has indexed it is never indexed.

// indexTable is one generation of a shard's index.
type indexTable struct {
	mask  uint64 // len(slots) − 1; len(slots) is a power of two
	slots []atomic.Pointer[entry]
}

// tombstone marks a deleted slot.
var tombstone = new(entry)

// index is one shard's part of the index.
type index struct {
	tab  atomic.Pointer[indexTable]
	mu   sync.Mutex // guards writes; a leaf lock
	live int        // entries in the table; under mu
	used int        // slots not empty (entries and tombstones); under mu
}

// indexMin is the fewest slots a table has.
const indexMin = 8

// probeStart is where key hash h starts probing: the bits above those that chose the shard.
func probeStart(h uint32, mask uint64) uint64 { return uint64(h>>6) & mask }

// find returns the entry indexed for key (hash h), or nil. It takes no lock.
func (ix *index) find(h uint32, key string) *entry {
	t := ix.tab.Load()
	if t == nil {
		return nil
	}
	for i := probeStart(h, t.mask); ; i = (i + 1) & t.mask {
		e := t.slots[i].Load()
		if e == nil {
			return nil
		}
		if e.hash == h && e != tombstone && e.key == key {
			return e
		}
	}
}

// put indexes e under its key, in place of any entry indexed for that key before. The caller
// holds e.mu.
func (ix *index) put(e *entry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	t := ix.tab.Load()
	if t == nil || 4*(ix.used+1) > 3*len(t.slots) {
		t = ix.rebuild(ix.live + 1)
	}
	free := -1
	for i := probeStart(e.hash, t.mask); ; i = (i + 1) & t.mask {
		v := t.slots[i].Load()
		switch {
		case v == nil:
			if free < 0 {
				free = int(i)
				ix.used++
			}
			t.slots[free].Store(e)
			ix.live++
			return
		case v == tombstone:
			if free < 0 {
				free = int(i)
			}
		case v.hash == e.hash && v.key == e.key:
			t.slots[i].Store(e)
			return
		}
	}
}

// del takes e out of the index if it is indexed. The caller holds e.mu.
func (ix *index) del(e *entry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	t := ix.tab.Load()
	if t == nil {
		return
	}
	for i := probeStart(e.hash, t.mask); ; i = (i + 1) & t.mask {
		v := t.slots[i].Load()
		if v == nil {
			return
		}
		if v == e {
			t.slots[i].Store(tombstone)
			ix.live--
			if len(t.slots) > indexMin && 8*ix.live < len(t.slots) {
				ix.rebuild(ix.live)
			}
			return
		}
	}
}

// rebuild makes a table for n entries holding the live entries of the current one, and swaps it
// in. The caller holds mu.
func (ix *index) rebuild(n int) *indexTable {
	size := indexMin
	for 3*size < 8*n { // a new table starts at most 3/8 full
		size *= 2
	}
	t := &indexTable{mask: uint64(size - 1), slots: make([]atomic.Pointer[entry], size)}
	if old := ix.tab.Load(); old != nil {
		for i := range old.slots {
			e := old.slots[i].Load()
			if e == nil || e == tombstone {
				continue
			}
			j := probeStart(e.hash, t.mask)
			for t.slots[j].Load() != nil {
				j = (j + 1) & t.mask
			}
			t.slots[j].Store(e)
		}
	}
	ix.used = ix.live
	ix.tab.Store(t)
	return t
}

// entries returns every entry indexed.
func (ix *index) entries() []*entry {
	t := ix.tab.Load()
	if t == nil {
		return nil
	}
	var out []*entry
	for i := range t.slots {
		if e := t.slots[i].Load(); e != nil && e != tombstone {
			out = append(out, e)
		}
	}
	return out
}

// clear empties the index and returns the entries it held.
func (ix *index) clear() []*entry {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	es := ix.entries()
	ix.tab.Store(nil)
	ix.live, ix.used = 0, 0
	return es
}

// bytes is the heap the index holds.
func (ix *index) bytes() int {
	if t := ix.tab.Load(); t != nil {
		return len(t.slots) * int(unsafe.Sizeof(atomic.Pointer[entry]{}))
	}
	return 0
}

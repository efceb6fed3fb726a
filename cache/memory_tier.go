package cache

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	gocachestore "github.com/eko/gocache/lib/v4/store"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The memory store keeps a policy around ristretto so that a flood of keys costs what it says
// and takes the right keys:
//
//   - Keys that are at or over a limit (or paused) are pinned: held in the store's own maps,
//     out of ristretto's reach, and their cost is taken out of ristretto's MaxCost so that both
//     tiers together stay within MemoryConfig.MaxCost. Evicting such a key would give its
//     client a full allowance again.
//   - Every other key lives in ristretto, whose TinyLFU policy picks the victims. When
//     ristretto's admission refuses a new key (it prefers the keys it has seen more often),
//     the store drops the oldest key in ristretto itself and tries again (and, when ristretto
//     holds nothing more, a pinned key that is no longer at its limit, among the first 256 it
//     looks at), so a new key is refused with ErrFull only when nothing but pinned keys is
//     left.
//   - The keys in ristretto are also on a list in admission order: it names the victims of a
//     refused admission, lets a sweep drop state that has expired on the store's clock
//     (ristretto's TTLs are not used: they run on the wall clock, and its expiry maps keep
//     room for every key admitted within a TTL, about 150 bytes per key in a flood), and lets
//     compact rebuild ristretto's maps, which Go never shrinks, once a flood has passed.

// shards is how many locks and pinned maps the keys are spread over.
const shards = 64

// tiers is the state of the policy; it is part of Memory.
type tiers struct {
	maxCost int64 // MemoryConfig.MaxCost
	shard   [shards]shard

	pinnedCost atomic.Int64 // sum of the costs of pinned entries
	pinnedN    atomic.Int64 // number of pinned entries

	listMu sync.Mutex // guards the list of entries in ristretto
	head   *entry     // oldest entry in ristretto (by admission, or by the sweep's rotation)
	tail   *entry
	listN  atomic.Int64 // entries on the list; changed under listMu
	peak   atomic.Int64 // most entries held (both tiers) since the last compaction

	rebuilding atomic.Bool // set while compact clears ristretto: its evictions are not losses

	stop, stopped chan struct{} // stop the janitor (memory_sweep.go); closed when it has
}

// shard serialises the admission, pinning and unpinning of the keys that hash to it, and holds
// those of them that are pinned. Lock order: shard.mu, then entry.mu, then listMu or pinMu
// (pinMu is held around map accesses only, never while taking another lock).
type shard struct {
	mu sync.Mutex
	// pinned is read and written under pinMu. An operation that leaves its key at its limit
	// puts the entry there under the entry's lock alone (so that no eviction or admission can
	// come between), and finishes the move under mu. Lookups go to the index (ix), which holds
	// the pinned entries too: the map is what the sweep and dropPinned walk.
	pinMu  sync.RWMutex
	pinned map[string]*entry
	// ix indexes every entry of the shard's keys held in either tier (memory_index.go).
	ix index
}

// sample returns up to n pinned entries (all when n < 0), in the map's (random) order.
func (sh *shard) sample(n int) []*entry {
	sh.pinMu.RLock()
	defer sh.pinMu.RUnlock()
	if n < 0 {
		n = len(sh.pinned)
	}
	out := make([]*entry, 0, min(n, len(sh.pinned)))
	for _, v := range sh.pinned {
		if len(out) == n {
			break
		}
		out = append(out, v)
	}
	return out
}

// put adds e to the pinned map.
func (sh *shard) put(e *entry) {
	sh.pinMu.Lock()
	if sh.pinned == nil {
		sh.pinned = map[string]*entry{}
	}
	sh.pinned[e.key] = e
	sh.pinMu.Unlock()
}

// del takes key out of the pinned map.
func (sh *shard) del(key string) {
	sh.pinMu.Lock()
	delete(sh.pinned, key)
	sh.pinMu.Unlock()
}

// shardOf returns the shard of e's key.
func (m *Memory) shardOf(e *entry) *shard { return &m.shard[e.hash%shards] }

// keyHash is key's hash: its low bits choose the shard, the rest the slot in the shard's index.
func (m *Memory) keyHash(key string) uint32 {
	h := maphash.String(m.seed, key)
	return uint32(h) ^ uint32(h>>32)
}

// lookup returns key's entry from the index (either tier).
func (m *Memory) lookup(_ context.Context, key string) (*entry, bool) {
	h := m.keyHash(key)
	e := m.shard[h%shards].ix.find(h, key)
	return e, e != nil
}

// admit puts a new entry for key in the store with fn applied to it (applied), unless another
// caller has meanwhile put one other than stale there, which it returns. fn is applied before
// the entry is shared (the shard's lock keeps the key's other callers waiting), so that a new
// key's first operation cannot be lost to an eviction that comes before it; and a key that
// this leaves at its limit goes straight to the pinned tier.
//
// Every entry of either tier is in the index (put there under its lock unless already
// evicted), and an entry in the index that is not evicted is held in a tier: so a lookup in the
// index under the shard's lock settles whether key has state.
func (m *Memory) admit(ctx context.Context, s *engine.Strategy, sh *shard, h uint32, key string, stale *entry, o *op, fn func([]engine.Counter, *engine.Upstream, time.Time)) (e *entry, applied bool, err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.ix.find(h, key); e != nil && e != stale {
		return e, false, nil
	}
	m.sweep(sh, sweepEach)
	e = newEntry(key, h, s)
	now := m.applyOp(e, s, o, fn)
	e.maintain(s, now) // the cost charged at admission is that of the state after fn
	if e.atLimit(s, now) && m.pinnedCost.Load()+int64(e.cost) <= m.maxCost {
		e.pinned = true
		sh.put(e)
		m.addPinned(1, int(e.cost))
		e.mu.Lock()
		sh.ix.put(e)
		e.mu.Unlock()
	} else {
		if err := m.insert(ctx, sh, e, int(e.cost), true); err != nil {
			m.rejected.Add(1)
			return nil, false, err
		}
		e.mu.Lock()
		m.link(e)
		if !e.evicted { // ristretto may have evicted it already, and then not from the index
			sh.ix.put(e)
		}
		e.mu.Unlock()
	}
	m.noteHeld()
	return e, true, nil
}

// insert puts e in ristretto with a synchronous set, and checks that ristretto kept it. When
// ristretto's admission refuses it and makeRoom is set, insert drops the oldest entry in
// ristretto (or a pinned entry no longer at its limit) and tries again; it returns an error
// wrapping ErrFull when nothing is left that may go. The caller holds sh, e's shard, and not
// e.mu.
func (m *Memory) insert(ctx context.Context, sh *shard, e *entry, cost int, makeRoom bool) error {
	opts := []gocachestore.Option{gocachestore.WithCost(int64(cost)), gocachestore.WithSynchronousSet()}
	for {
		if err := m.store.Set(ctx, e.key, e, opts...); err != nil {
			// ristretto drops a set when its buffer is full; after a flush there is room.
			m.client.Wait()
			if err := m.store.Set(ctx, e.key, e, opts...); err != nil {
				return fmt.Errorf("ratemonitor: memory store: writing key %q: %w", e.key, err)
			}
		}
		if got, ok := m.get(ctx, e.key); ok && got == e {
			return nil
		}
		if !makeRoom || !m.dropOldest(sh, e) && !m.dropPinned(sh) {
			return fmt.Errorf("%w: key %q does not fit in MaxCost %d bytes beside %d keys at their limits (%d bytes); nothing was recorded",
				ErrFull, e.key, m.maxCost, m.pinnedN.Load(), m.pinnedCost.Load())
		}
	}
}

// link puts e, just admitted to ristretto, at the tail of the list, unless ristretto has
// already evicted it. The caller holds e.mu.
func (m *Memory) link(e *entry) {
	if e.evicted || e.pinned || e.listed {
		return
	}
	m.listMu.Lock()
	e.listed, e.prev, e.next = true, m.tail, nil
	if m.tail != nil {
		m.tail.next = e
	} else {
		m.head = e
	}
	m.tail = e
	m.listN.Add(1)
	m.listMu.Unlock()
}

// unlink takes e off the list. The caller holds e.mu.
func (m *Memory) unlink(e *entry) {
	m.listMu.Lock()
	m.unlinkLocked(e)
	m.listMu.Unlock()
}

// touch moves e, if it is on the list, to its tail: an entry in use is then not among the
// oldest that a refused admission drops (dropOldest). Operations found in the index call it with
// their sampled Get (getSample), so a hot key moves about once per 16 operations. The caller
// holds no lock of the store; listed is read under listMu, which every change of it holds.
func (m *Memory) touch(e *entry) {
	m.listMu.Lock()
	defer m.listMu.Unlock()
	if !e.listed || e == m.tail {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		m.head = e.next
	}
	e.next.prev = e.prev // e is not the tail
	e.prev, e.next = m.tail, nil
	m.tail.next, m.tail = e, e
}

func (m *Memory) unlinkLocked(e *entry) {
	if !e.listed {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		m.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		m.tail = e.prev
	}
	e.listed, e.prev, e.next = false, nil, nil
	m.listN.Add(-1)
}

// noteHeld raises the high-water mark of entries held that compaction is judged against.
func (m *Memory) noteHeld() {
	held := m.held()
	for {
		p := m.peak.Load()
		if held <= p || m.peak.CompareAndSwap(p, held) {
			return
		}
	}
}

// held is the number of entries in both tiers.
func (m *Memory) held() int64 { return m.listN.Load() + m.pinnedN.Load() }

// victimScan bounds how many list entries a refused admission looks at for one it may drop.
const victimScan = 64

// dropOldest drops the oldest entry in ristretto other than except, whose shard the caller
// can lock without waiting (the caller holds sh); it reports whether it dropped one.
func (m *Memory) dropOldest(sh *shard, except *entry) bool {
	for range 4 {
		v, vs := m.pickVictim(sh, except)
		if v == nil {
			return false
		}
		dropped := m.drop(v, false)
		if vs != sh {
			vs.mu.Unlock()
		}
		if dropped {
			return true
		}
	}
	return false
}

// pickVictim returns the oldest listed entry other than except with its shard locked (unless
// that is sh, which the caller holds), or nil when there is none.
func (m *Memory) pickVictim(sh *shard, except *entry) (*entry, *shard) {
	m.listMu.Lock()
	defer m.listMu.Unlock()
	n := 0
	for v := m.head; v != nil && n < victimScan; v, n = v.next, n+1 {
		if v == except {
			continue
		}
		vs := m.shardOf(v)
		if vs == sh || vs.mu.TryLock() {
			return v, vs
		}
	}
	return nil, nil
}

// drop removes v, an entry of a shard the caller holds, from whichever tier holds it, and
// reports a live eviction unless its state has expired. With onlyExpired, it drops v only when
// nothing counts any more and its keep-until instant (ttlUntil) has passed. It reports whether
// it dropped v.
func (m *Memory) drop(v *entry, onlyExpired bool) bool {
	v.mu.Lock()
	if v.evicted || v.pinning {
		if v.pinning {
			m.unlink(v) // at its limit: finishPin takes it out of ristretto
		}
		v.mu.Unlock()
		return false
	}
	now := m.clock.Now()
	live := v.live(now)
	if onlyExpired && (live || now.UnixNano() < v.keepUntil()) {
		v.mu.Unlock()
		return false
	}
	v.evicted = true
	m.shardOf(v).ix.del(v)
	pinned := v.pinned
	if pinned {
		m.shardOf(v).del(v.key)
		v.pinned = false
		m.addPinned(-1, -int(v.cost))
	} else {
		m.unlink(v)
	}
	v.mu.Unlock()
	if !pinned {
		// No other entry for v.key can be admitted meanwhile: the caller holds its shard.
		m.client.Del(v.key)
	}
	if live {
		m.reportEviction(v.key)
	}
	return true
}

// live reports whether e still holds anything that counts, or a pause, at now. The caller
// holds e.mu.
func (e *entry) live(now time.Time) bool {
	return engine.Expiry(e.counters).After(now) || e.pausedUntil().After(now)
}

// atLimit reports whether e's key has no room for one more request under s at now, or under
// any strategy used on it before until an instant still to come (limitUntil), or is paused:
// such a key is pinned. A key used with several strategies (stacked Transports: the outer
// one's minute rule, the inner one's day rule) is thus not unpinned, and left to the flood's
// evictions, by an operation of a strategy whose rules have room. The caller holds e.mu.
func (e *entry) atLimit(s *engine.Strategy, now time.Time) bool {
	return e.atLimitNs(s, now, now.UnixNano())
}

// atLimitNs is atLimit with ns = now.UnixNano() at hand.
func (e *entry) atLimitNs(s *engine.Strategy, now time.Time, ns int64) bool {
	e.catchUp()
	// The checks below may read the counters at ns (moving their time there): e.hw must stay
	// an upper bound of it, or a later step back from ns would skip its rebase (applyAt).
	e.hw = max(e.hw, ns)
	if e.limitUntil > ns || e.more != nil && e.more.up.PausedUntil.After(now) { // pausedUntil, without the call
		return true
	}
	cs := e.slotsOf(s)
	if cs == nil {
		return false
	}
	if s == e.base {
		if e.room > 0 {
			return false // room left since it was counted (only for a refusable base): one more request fits
		}
		if refusable(s) {
			if room := roomOf(s, cs, now, ns); room >= 1 {
				e.room = uint8(min(room, math.MaxUint8))
				return false
			}
		}
	}
	if s.Nanos() {
		if w := s.WaitNanos(cs, ns, 1); w > 0 {
			e.limitUntil = ns + w
			return true
		}
		return false
	}
	if w := s.Wait(cs, now, 1); w > 0 {
		e.limitUntil = now.Add(w).UnixNano()
		return true
	}
	return false
}

// pinScan bounds how many pinned entries a refused admission looks at for one it may drop.
const pinScan = 256

// dropPinned drops one pinned entry whose state has expired or that is no longer at its limit
// (checked with the strategy it was last used with), from a shard the caller can lock without
// waiting; it reports whether it dropped one.
func (m *Memory) dropPinned(sh *shard) bool {
	if m.pinnedN.Load() == 0 {
		return false
	}
	now := m.clock.Now()
	start := int(maphash.Comparable(m.seed, now.UnixNano()) % shards)
	seen := 0
	for i := range shards {
		vs := &m.shard[(start+i)%shards]
		if vs != sh && !vs.mu.TryLock() {
			continue
		}
		var victim *entry
		for _, v := range vs.sample(pinScan - seen) {
			seen++
			v.mu.Lock()
			free := !v.pinning && !v.atLimit(v.strat(), now)
			v.mu.Unlock()
			if free {
				victim = v
				break
			}
		}
		dropped := victim != nil && m.drop(victim, false)
		if vs != sh {
			vs.mu.Unlock()
		}
		if dropped {
			return true
		}
		if seen >= pinScan {
			return false
		}
	}
	return false
}

// addPinned changes the pinned tier's count and cost by n and cost, and gives ristretto the
// rest of MaxCost.
func (m *Memory) addPinned(n int64, cost int) {
	m.pinnedN.Add(n)
	pinned := m.pinnedCost.Add(int64(cost))
	m.client.UpdateMaxCost(max(m.maxCost-pinned, 0))
}

// startPin puts e, which the operation under way has left at its limit, in its shard's pinned
// map, unless the pinned tier would pass MaxCost. From here ristretto's eviction of e is no
// loss (evicted sees it pinned) and lookups find it pinned. The caller holds e.mu, and calls
// finishPin once it has let go of it; startPin reports whether it did pin e.
func (m *Memory) startPin(e *entry) bool {
	if e.evicted || e.pinned || m.pinnedCost.Load()+int64(e.cost) > m.maxCost {
		return false
	}
	e.pinned, e.pinning, e.dropped = true, true, false
	m.shardOf(e).put(e)
	return true
}

// finishPin takes e out of ristretto and counts it in the pinned tier. The caller holds
// neither e's shard nor e.mu.
func (m *Memory) finishPin(e *entry) {
	sh := m.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.mu.Lock()
	if !e.pinning {
		e.mu.Unlock()
		return
	}
	e.pinning = false
	m.unlink(e)
	m.addPinned(1, int(e.cost))
	e.mu.Unlock()
	// The shard's lock keeps any other entry for e.key out of ristretto until the delete is
	// queued.
	m.client.Del(e.key)
}

// unpin moves e from its shard's pinned map back to ristretto. If ristretto cannot take it,
// it stays pinned (and counted). The caller holds neither e's shard nor e.mu.
func (m *Memory) unpin(ctx context.Context, e *entry) {
	sh := m.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.mu.Lock()
	if e.evicted || !e.pinned || e.pinning {
		e.mu.Unlock()
		return
	}
	e.dropped = false
	cost := int(e.cost)
	e.mu.Unlock()
	if m.insert(ctx, sh, e, cost, false) != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dropped || e.evicted || !e.pinned {
		return // ristretto has let it go again: it stays pinned
	}
	sh.del(e.key)
	e.pinned = false
	m.addPinned(-1, -int(e.cost))
	m.link(e)
}

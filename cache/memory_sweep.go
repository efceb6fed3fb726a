package cache

import "time"

// sweepEach is how many entries of each tier an admission looks at for expired state, so that
// a flood finds room in expired keys first.
const sweepEach = 2

// The janitor sweeps every sweepPeriod (wall time) at least 1/sweepRounds of the entries (and
// sweepMin), so that it looks at every entry about every sweepRounds periods.
const (
	sweepPeriod = time.Second
	sweepRounds = 30
	sweepMin    = 256
)

// startJanitor starts the goroutine that sweeps expired state and compacts the store; Close
// stops it.
func (m *Memory) startJanitor() {
	m.stop, m.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.stopped)
		tick := time.NewTicker(sweepPeriod)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
				m.sweepTick()
			}
		}
	}()
}

// stopJanitor stops the janitor and waits for it to return. The caller holds no lock of the
// store (the janitor takes life).
func (m *Memory) stopJanitor() {
	close(m.stop)
	<-m.stopped
}

// sweepTick is one round of the janitor.
func (m *Memory) sweepTick() {
	m.life.RLock()
	if m.closed.Load() {
		m.life.RUnlock()
		return
	}
	m.sweep(nil, int(max(m.listN.Load()/sweepRounds, sweepMin)))
	for i := range m.shard {
		sh := &m.shard[i]
		sh.mu.Lock()
		sh.pinMu.RLock()
		n := max(len(sh.pinned)/sweepRounds, sweepMin/shards)
		sh.pinMu.RUnlock()
		for _, v := range sh.sample(n) {
			m.drop(v, true)
		}
		sh.mu.Unlock()
	}
	m.life.RUnlock()
	m.maybeCompact()
}

// sweep drops up to n expired entries from the head of the list (rotating the live ones it
// looks at to the tail) and looks at up to n pinned entries of sh. The caller holds sh
// (nil: no shard, when the sweep may wait for the shards' locks).
func (m *Memory) sweep(sh *shard, n int) {
	for range n {
		m.listMu.Lock()
		v := m.head
		if v == nil {
			m.listMu.Unlock()
			break
		}
		if v != m.tail { // rotate, so that the next sweep looks at the next entry
			m.head, v.next.prev = v.next, nil
			v.prev, v.next = m.tail, nil
			m.tail.next, m.tail = v, v
		}
		vs := m.shardOf(v)
		locked := vs == sh || sh != nil && vs.mu.TryLock()
		m.listMu.Unlock()
		if sh == nil {
			vs.mu.Lock() // after listMu is released: shard locks come first
			locked = true
		}
		if !locked {
			continue
		}
		m.drop(v, true)
		if vs != sh {
			vs.mu.Unlock()
		}
	}
	if sh == nil || m.pinnedN.Load() == 0 {
		return
	}
	for _, v := range sh.sample(n) {
		m.drop(v, true)
	}
}

// sweepAll drops the state of every key that has expired on the store's clock, in both tiers,
// and then compacts the store if it now holds less than a quarter of its peak.
func (m *Memory) sweepAll() {
	m.life.RLock()
	if m.closed.Load() {
		m.life.RUnlock()
		return
	}
	m.sweep(nil, int(m.listN.Load()))
	for i := range m.shard {
		sh := &m.shard[i]
		sh.mu.Lock()
		for _, v := range sh.sample(-1) {
			m.drop(v, true)
		}
		sh.mu.Unlock()
	}
	m.life.RUnlock()
	m.maybeCompact()
}

// compactMin is the least peak of entries held for which compaction is worth its pause.
const compactMin = 1024

// compactDue reports whether the store holds less than a quarter of the entries it held at
// its peak: the rest of the memory its maps grew to is held for nothing.
func (m *Memory) compactDue() bool {
	peak := m.peak.Load()
	return peak >= compactMin && 4*m.held() < peak
}

// maybeCompact compacts the store when compactDue. The caller holds no lock of the store.
func (m *Memory) maybeCompact() {
	if m.compactDue() {
		m.compact()
	}
}

// compact gives back the memory that ristretto's maps and the pinned maps grew to at a peak:
// Go maps never shrink, so after a flood of keys has expired they would hold about a third of
// the peak heap for ever. It rebuilds them with what is still held: ristretto's Clear makes its
// maps anew and the entries are set again (all fit, being within its MaxCost, so ristretto's
// admission is not asked). Operations that reach ristretto (admissions, new costs, moves
// between the tiers, sampled Gets) wait meanwhile (about 1 µs per entry held); the others go on
// under their entries' locks, which compact takes too.
func (m *Memory) compact() {
	m.life.Lock()
	defer m.life.Unlock()
	if m.closed.Load() || !m.compactDue() {
		return
	}
	m.listMu.Lock()
	es := make([]*entry, 0, m.listN.Load())
	for v := m.head; v != nil; v = v.next {
		es = append(es, v)
	}
	m.listMu.Unlock()
	m.rebuilding.Store(true)
	m.client.Clear()
	m.rebuilding.Store(false)
	kept := es[:0]
	for _, e := range es {
		e.mu.Lock()
		cost, gone := int64(e.cost), e.evicted || !e.listed
		e.mu.Unlock()
		if gone || m.drop(e, true) { // no admission is under way (they hold life): no shard lock is needed
			continue
		}
		if !m.client.Set(e.key, e, cost) {
			m.client.Wait() // the set buffer was full
			if !m.client.Set(e.key, e, cost) {
				m.drop(e, false)
				continue
			}
		}
		kept = append(kept, e)
	}
	m.client.Wait()
	for _, e := range kept {
		if got, ok := m.client.Get(e.key); !ok || got != e {
			m.drop(e, false)
		}
	}
	for i := range m.shard {
		sh := &m.shard[i]
		sh.pinMu.Lock()
		var pinned map[string]*entry
		if len(sh.pinned) > 0 {
			pinned = make(map[string]*entry, len(sh.pinned))
			for k, v := range sh.pinned {
				pinned[k] = v
			}
		}
		sh.pinned = pinned
		sh.pinMu.Unlock()
	}
	m.peak.Store(m.held())
}

package degrade

import (
	"context"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The Store's cache.Store methods: each operation follows the state (Store.mode) to the
// shared store, the memory store, or both.

// maxSwitches bounds how often one operation follows the state from store to store (each
// switch is a store's answer: an outage, or a probe that succeeded) before it gives up with
// the last error.
const maxSwitches = 4

// whileDegraded runs f, a memory-store operation of the degraded state, so that a return to
// the shared store waits for it before its last carry (probed); it runs nothing and reports
// false when the state is no longer degraded.
func (d *Store) whileDegraded(f func()) bool {
	d.mu.Lock()
	if d.state != Degraded {
		d.mu.Unlock()
		return false
	}
	d.inflight++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		if d.inflight--; d.inflight == 0 {
			d.idle.Broadcast()
		}
		d.mu.Unlock()
	}()
	f()
	return true
}

// scaledFor returns s scaled to this episode's share.
func (d *Store) scaledFor(s *engine.Strategy) *engine.Strategy {
	k := strategyKey(s)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.scaled == nil {
		d.scaled = map[string]*engine.Strategy{}
		d.share = d.EpisodeShare()
	}
	sc, ok := d.scaled[k]
	if !ok {
		sc = s.Scaled(d.share)
		d.scaled[k] = sc
	}
	return sc
}

// touched notes a local grant or record on key, for the carry-over.
func (d *Store) touched(s, sc *engine.Strategy, key string) {
	d.mu.Lock()
	if d.used == nil {
		d.used = map[usedKey]usedEntry{}
	}
	d.used[usedKey{strat: strategyKey(s), key: key}] = usedEntry{orig: s, scaled: sc, last: d.clock.Now()}
	d.mu.Unlock()
}

// holdUntil is when s's first local grant of this outage may come: once every grant the shared
// store made before the outage was seen has aged out of s's longest window. Zero with
// NoHoldBack.
func (d *Store) holdUntil(s *engine.Strategy) time.Time {
	if d.cfg.NoHoldBack {
		return time.Time{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.since.Add(s.Longest())
}

// burstErr says why a burst cannot fit this process's share.
func (d *Store) burstErr(err error) error {
	return fmt.Errorf("ratemonitor: degraded mode (store %s unreachable) paces on this process's share of each limit: %w", d.name, err)
}

// localReserve reserves on the memory store at the share and, with hold, after the hold-back.
func (d *Store) localReserve(ctx context.Context, s *engine.Strategy, key string, n int, hold bool) (engine.Result, error) {
	sc := d.scaledFor(s)
	if err := sc.CheckBurst(n); err != nil {
		return engine.Result{}, d.burstErr(err)
	}
	// A closed Store answers ErrClosed before the hold-back's wait, so that its owner's paced
	// callers stop now rather than sleep and probe until the hold-back ends (a day for a day
	// rule).
	local, err := d.mem()
	if err != nil {
		return engine.Result{}, err
	}
	if until, now := d.holdUntil(s), d.clock.Now(); hold && now.Before(until) {
		return engine.Result{Wait: until.Sub(now)}, nil
	}
	res, err := local.Reserve(ctx, sc, key, n)
	if err == nil && res.Allowed {
		d.touched(s, sc, key)
	}
	return res, err
}

// Reserve implements cache.Store.
func (d *Store) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (res engine.Result, err error) {
	for range maxSwitches {
		state, probe, at := d.mode()
		if probe && d.probe(ctx, s, key) {
			state, at = Settling, d.seenNow()
		}
		switch state {
		case Degraded:
			if d.whileDegraded(func() { res, err = d.localReserve(ctx, s, key, n, true) }) {
				return res, err
			}
			continue // back meanwhile
		case Settling:
			var again bool
			if res, again, err = d.settleReserve(ctx, s, key, n, at); !again {
				return res, err
			}
			continue
		}
		start := d.clock.Now()
		res, err = d.shared.Reserve(ctx, s, key, n)
		if err == nil && d.masterChange(at, start) != useAnswer {
			continue // fenced, or started before a switch: the grant stays counted, unused
		}
		if !IsOutage(ctx, err) {
			return res, err
		}
		d.fail(err, start)
	}
	if err == nil {
		// The last answer was one not to use (fenced or stale): a refusal with a short wait,
		// after which the caller asks again in the state the switches have left.
		return engine.Result{Allowed: false, Wait: d.cfg.ProbeInterval}, nil
	}
	return res, err
}

// settleReserve grants a burst only when both the memory store (at the share) and the shared
// store have room; the shared store's instant is the one returned. No hold-back: the shared
// store holds what it granted before the outage (a store that lost it, restarted empty,
// reports StateLost; counts restart lower then for every process, degraded or not). again
// says that the caller is to go round again: the shared store failed (the Store is
// degraded again), or its answer came from a new master (fenced) or is stale (see
// masterChange).
func (d *Store) settleReserve(ctx context.Context, s *engine.Strategy, key string, n int, at seen) (res engine.Result, again bool, err error) {
	lres, err := d.localReserve(ctx, s, key, n, false)
	if err != nil || !lres.Allowed {
		return lres, false, err
	}
	sc := d.scaledFor(s)
	start := d.clock.Now()
	res, err = d.shared.Reserve(ctx, s, key, n)
	unused := err == nil && d.masterChange(at, start) != useAnswer
	if err != nil || !res.Allowed || unused {
		if local, lerr := d.mem(); lerr == nil {
			local.Release(context.WithoutCancel(ctx), sc, key, lres.At, n)
		}
	}
	if unused {
		return res, true, nil // the shared grant stays counted, unused
	}
	if IsOutage(ctx, err) {
		d.fail(err, start)
		return res, true, err
	}
	return res, false, err
}

// Record implements cache.Store: on the memory store while degraded, on both while settling.
func (d *Store) Record(ctx context.Context, s *engine.Strategy, key string, n int) (err error) {
	local := func() error {
		sc := d.scaledFor(s)
		local, err := d.mem()
		if err != nil {
			return err
		}
		err = local.Record(ctx, sc, key, n)
		if err == nil {
			d.touched(s, sc, key)
		}
		return err
	}
	for range maxSwitches {
		state, probe, at := d.mode()
		if probe && d.probe(ctx, s, key) {
			state, at = Settling, d.seenNow()
		}
		if state == Degraded {
			if d.whileDegraded(func() { err = local() }) {
				return err
			}
			continue
		}
		start := d.clock.Now()
		err = d.shared.Record(ctx, s, key, n)
		if IsOutage(ctx, err) {
			d.fail(err, start)
			continue
		}
		if err == nil {
			switch d.masterChange(at, start) {
			case fencedNow:
				return nil // counted on the new master: the request is recorded
			case staleAnswer:
				// Recorded on the shared store; a Store that has switched since counts
				// it on the memory store too, which is what it paces by now.
				if d.State() != Healthy {
					return local()
				}
				return nil
			}
		}
		if err == nil && state == Settling {
			return local()
		}
		return err
	}
	return err
}

// Release implements cache.Store: on the store the current state reserves on (the shared one
// while settling). Its owner gives back only slots of the current generation (Gen).
func (d *Store) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	d.mu.Lock()
	state := d.state
	d.mu.Unlock()
	if state == Degraded {
		local, err := d.mem()
		if err != nil {
			return err
		}
		return local.Release(ctx, d.scaledFor(s), key, at, n)
	}
	return d.shared.Release(ctx, s, key, at, n)
}

// localPeek is Peek on the memory store at the share, with the hold-back in the wait when
// hold is set.
func (d *Store) localPeek(ctx context.Context, s *engine.Strategy, key string, n int, hold bool) (strategy.Snapshot, error) {
	sc := d.scaledFor(s)
	if n > 0 {
		if err := sc.CheckBurst(n); err != nil {
			return strategy.Snapshot{}, d.burstErr(err)
		}
	}
	local, err := d.mem()
	if err != nil {
		return strategy.Snapshot{}, err
	}
	snap, err := local.Peek(ctx, sc, key, n)
	if err == nil && n > 0 && hold {
		if until, now := d.holdUntil(s), d.clock.Now(); now.Before(until) {
			snap.Wait = max(snap.Wait, until.Sub(now))
		}
	}
	return snap, err
}

// Peek implements cache.Store: while degraded, usage is the memory store's, against the
// scaled rules; while settling, the wait is the longer of both stores'.
func (d *Store) Peek(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Snapshot, error) {
	for range maxSwitches {
		state, probe, at := d.mode()
		if probe && d.probe(ctx, s, key) {
			state, at = Settling, d.seenNow()
		}
		if state == Degraded {
			return d.localPeek(ctx, s, key, n, true)
		}
		start := d.clock.Now()
		snap, err := d.shared.Peek(ctx, s, key, n)
		if IsOutage(ctx, err) {
			d.fail(err, start)
			return d.localPeek(ctx, s, key, n, true)
		}
		if err == nil {
			switch d.masterChange(at, start) {
			case fencedNow:
				return d.localPeek(ctx, s, key, n, true)
			case staleAnswer:
				continue // read again in the current state
			}
		}
		if err == nil && state == Settling && n > 0 {
			if l, lerr := d.localPeek(ctx, s, key, n, false); lerr == nil {
				snap.Wait = max(snap.Wait, l.Wait)
			}
		}
		return snap, err
	}
	return d.localPeek(ctx, s, key, n, true)
}

// mem returns the memory store, made on first use with Config's clock, logger and observer
// (only the owner's keys live there: the default cost bound is ample). After Close it returns
// an error wrapping cache.ErrClosed.
func (d *Store) mem() (*cache.Memory, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("ratemonitor: degraded mode: %w", cache.ErrClosed)
	}
	if d.local == nil {
		m, err := cache.NewMemory(cache.MemoryConfig{Clock: d.clock, Logger: d.cfg.Logger, Observer: d.cfg.Observer})
		if err != nil {
			return nil, fmt.Errorf("ratemonitor: degraded mode's memory store: %w", err)
		}
		d.local = m
	}
	return d.local, nil
}

// Close closes the memory store, if one was made; the shared store is the caller's. A
// Store closed while degraded reports observe.Recovered (Err: cache.ErrClosed), so that
// every Degraded has its end and a gauge of degraded Transports (metrics' degraded) comes back
// down; it reports it once, however often it is closed.
func (d *Store) Close() error {
	d.mu.Lock()
	ended := !d.closed && d.state == Degraded
	d.closed = true
	down := d.clock.Now().Sub(d.since)
	local := d.local
	d.mu.Unlock()
	if ended && d.cfg.Observer != nil {
		d.cfg.Observer.Observe(observe.Event{Kind: observe.Recovered, Store: d.name, Wait: down, Err: cache.ErrClosed})
	}
	if local == nil {
		return nil
	}
	return local.Close()
}

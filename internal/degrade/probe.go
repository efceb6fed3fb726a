package degrade

import (
	"context"
	"log/slog"
	"time"

	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// probed ends a probe that started at start: ok means the shared store answered and the
// carry-over is in it.
//
// The return settles for the longest window, plus ProbeInterval, plus the slowest failed call
// to the shared store seen in the outage: a process still degraded may have granted locally
// until ProbeInterval and one such call after the store came back (its probe was not due
// yet), and those grants reach the shared store only when it returns; if it has no call to
// make, it never returns, and they must have aged out before this process goes by the shared
// store alone.
func (d *Store) probed(ok bool, start time.Time) {
	d.mu.Lock()
	d.probing = false
	now := d.clock.Now()
	if !ok || d.state != Degraded {
		if !ok {
			d.slowest = max(d.slowest, now.Sub(start))
		}
		d.nextProbe = now.Add(d.cfg.ProbeInterval)
		d.mu.Unlock()
		return
	}
	down := now.Sub(d.since)
	d.state, d.returned = Settling, now
	d.settle = d.cfg.Longest + d.cfg.ProbeInterval + d.slowest
	d.gen.Add(1)
	for d.inflight > 0 {
		d.idle.Wait() // local-only operations that began before the switch (memory: brief)
	}
	d.mu.Unlock()
	d.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "ratemonitor: shared store answers again: back from degraded mode",
		slog.String("store", d.name), slog.Duration("degraded", down))
	if d.cfg.Observer != nil {
		d.cfg.Observer.Observe(observe.Event{Kind: observe.Recovered, Store: d.name, Wait: down})
	}
}

// probe writes to the shared store on key (a Reserve of 1, given back at once by Release, so
// that it counts nothing in the end; a refused Reserve is a write too) and, when that works,
// carries this process's local grants into it (see carry) and returns to it. A read alone is
// not enough: it can succeed where writes fail (SQLite's readers while another process holds
// the write lock), and a return on a read would meet the next write's failure and start the
// hold-back again, for ever. The carry is made twice: once while the other callers are still
// served by the memory store, and once more, for what they granted meanwhile, after the
// switch, when no local-only grant is in flight.
func (d *Store) probe(ctx context.Context, s *engine.Strategy, key string) bool {
	start := d.clock.Now()
	res, err := d.shared.Reserve(ctx, s, key, 1)
	if err == nil && res.Allowed {
		err = d.shared.Release(ctx, s, key, res.At, 1) // on failure, one slot over-counted
	}
	if err != nil {
		d.probed(false, start)
		return false
	}
	if d.probeTooSoon() {
		return false
	}
	counts, ok := d.carry(ctx, nil)
	d.probed(ok, start)
	if ok {
		d.carry(ctx, counts) // a failure here is an outage the next call meets
	}
	return ok
}

// carried names one counter of one key in carry's counts.
type carried struct {
	usedKey
	slot int
}

// carry records in the shared store, for every key and counter this process granted or
// recorded on locally within the strategy's longest window, as many requests as the memory
// store still counts there, less what before says was carried already. It returns what the
// memory store counted. Record counts them at the shared store's instant, later than they
// were sent: they count there a little longer than they do upstream (conservative). The
// caller's cancellation does not stop it half way (each call is bounded by the store's own
// timeout); on a failure it reports false, and what was carried already is carried again by
// the next probe (an over-count, never an under-count).
func (d *Store) carry(ctx context.Context, before map[carried]int) (map[carried]int, bool) {
	ctx = context.WithoutCancel(ctx)
	d.mu.Lock()
	type item struct {
		k usedKey
		e usedEntry
	}
	var items []item
	for k, e := range d.used {
		items = append(items, item{k, e})
	}
	local := d.local
	d.mu.Unlock()
	counts := map[carried]int{}
	if local == nil {
		return counts, true
	}
	now := d.clock.Now()
	for _, it := range items {
		if !now.Before(it.e.last.Add(it.e.orig.Longest())) {
			continue // every local grant has stopped counting
		}
		snap, err := local.Peek(ctx, it.e.scaled, it.k.key, 0)
		if err != nil {
			continue
		}
		for i, u := range snap.Usage {
			c := carried{it.k, it.e.orig.SlotOf(i)}
			if _, seen := counts[c]; seen {
				continue
			}
			counts[c] = u.Used
			if n := u.Used - before[c]; n > 0 {
				id := it.e.orig.CounterID(c.slot)
				sub := it.e.orig.Without(func(other string) bool { return other != id })
				if err := d.shared.Record(ctx, sub, it.k.key, n); err != nil {
					return counts, false
				}
			}
		}
	}
	return counts, true
}

package ratemonitor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The degrader's states. healthy: every operation goes to the shared store. degraded: to the
// memory store, at the share, after the hold-back; a probe of the shared store at most every
// ProbeInterval. settling: the shared store answers again; for settle (see probed) a reserve
// must be granted by both stores, so that this process stays at its share while others may
// still be degraded (see Degrade).
const (
	healthy = iota
	degraded
	settling
)

// degrader is the Transport's store under StoreErrorPolicy Degrade: a cache.Store that routes each
// operation to the shared store or to the degraded mode's memory store.
type degrader struct {
	t       *Transport
	shared  cache.Store
	clock   clock.Clock
	cfg     DegradedConfig
	name    string        // the shared store's name for events
	longest time.Duration // the longest window of the Transport's rules, margins included
	fleet   func() int    // nil when the store does not count its processes (cache.Traits.Processes)
	// sentinel names the master behind a Sentinel client (degrader_master.go), nil if the
	// store cannot.
	sentinel sentinelStore

	// gen counts the switches between the stores: a slot reserved in one generation is given
	// back only in the same one (Transport.releaseIn).
	gen atomic.Uint64

	mu        sync.Mutex
	local     *cache.Memory // made at the first outage (mem): a healthy Transport runs no goroutine for it
	closed    bool          // Close was called: no memory store is made any more
	state     int
	since     time.Time // the instant (Transport's clock) the outage was seen; the hold-back starts there
	returned  time.Time // the instant the shared store answered again (settling)
	nextProbe time.Time
	probing   bool
	share     float64
	settle    time.Duration               // how long the current return settles (probed)
	slowest   time.Duration               // the longest a failed call to the shared store took, this episode
	inflight  int                         // memory-store operations of the degraded state under way (whileDegraded)
	idle      sync.Cond                   // signalled when inflight drops to 0; its L is &mu
	scaled    map[string]*engine.Strategy // by strategyKey, for this episode's share
	used      map[usedKey]usedEntry       // keys granted locally, for the carry-over
	master    string                      // the Sentinel master last seen (masterChange)
}

type usedKey struct {
	strat string // strategyKey: a strategy made again by Without has the same
	key   string
}

type usedEntry struct {
	orig, scaled *engine.Strategy
	last         time.Time // the last local grant or record
}

func newDegrader(t *Transport, cfg DegradedConfig, longest time.Duration) *degrader {
	d := &degrader{t: t, shared: t.store, clock: t.clock, cfg: cfg,
		name: storeName(t.store), longest: longest}
	d.idle.L = &d.mu
	d.fleet = traitsOf(t.store).Processes
	d.sentinel, _ = t.store.(sentinelStore)
	return d
}

// strategyKey names a strategy by its algorithm and rules, every field of them, and whether it
// is smoothed: counter IDs alone would not do, since rules of one window but different limits
// share a counter.
func strategyKey(s *engine.Strategy) string {
	var b strings.Builder
	b.WriteString(s.Name())
	if s.Smoothing() {
		b.WriteString("+smoothed")
	}
	for i := range s.NumRules() {
		fmt.Fprintf(&b, "|%+v", s.Rule(i))
	}
	return b.String()
}

// episodeShare is the share for an outage starting now (see DegradedConfig.Share).
func (d *degrader) episodeShare() float64 {
	switch {
	case d.cfg.Share > 0:
		return d.cfg.Share
	case d.cfg.Processes > 0:
		return 1 / float64(d.cfg.Processes)
	case d.fleet != nil:
		if p := d.fleet(); p > 0 {
			return 1 / float64(p)
		}
	}
	return 1
}

// seen is what an operation noted when it started, for masterChange once its shared-store call
// has answered: the Sentinel master noted so far and the generation (switches between the
// stores) it started in.
type seen struct {
	master string
	gen    uint64
}

// mode returns the state an operation should use now, whether this caller is to probe the
// shared store (degraded, and a probe is due: nobody else is probing), and what it has seen
// (see seen). It ends a settling return that has lasted settle.
func (d *degrader) mode() (state int, probe bool, at seen) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at = seen{master: d.master, gen: d.gen.Load()}
	now := d.clock.Now()
	switch d.state {
	case settling:
		if !now.Before(d.returned.Add(d.settle)) {
			// Both states give slots back on the shared store: the generation stays.
			d.state = healthy
			d.used = nil
		}
	case degraded:
		if !d.probing && !now.Before(d.nextProbe) {
			d.probing = true
			return degraded, true, at
		}
	}
	return d.state, false, at
}

// stateNow is the current state, without mode's side effects (no probe claimed, no return
// ended).
func (d *degrader) stateNow() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state
}

// seenNow is what an operation starting now would see (mode's third result), for one that has
// just made a successful probe: the probe noted the master and switched the generation.
func (d *degrader) seenNow() seen {
	d.mu.Lock()
	defer d.mu.Unlock()
	return seen{master: d.master, gen: d.gen.Load()}
}

// fail enters the degraded state for err, from a call to the shared store that started at
// start, unless it is already degraded (one Degraded event per outage), and reports it.
func (d *degrader) fail(err error, start time.Time) {
	d.mu.Lock()
	share, begun := d.failLocked(start)
	d.mu.Unlock()
	if begun {
		d.reportDegraded(err, share)
	}
}

// failLocked is fail's state change, with d.mu held: begun says that it started an episode
// (the caller reports it, after unlocking, with share).
func (d *degrader) failLocked(start time.Time) (share float64, begun bool) {
	now := d.clock.Now()
	if d.state == degraded {
		d.slowest = max(d.slowest, now.Sub(start))
		return 0, false
	}
	d.slowest = now.Sub(start)
	d.state, d.since, d.nextProbe = degraded, now, now.Add(d.cfg.ProbeInterval)
	if share := d.episodeShare(); share != d.share || d.scaled == nil {
		d.share, d.scaled = share, map[string]*engine.Strategy{}
	}
	if d.used == nil {
		d.used = map[usedKey]usedEntry{}
	}
	d.gen.Add(1)
	return d.share, true
}

// reportDegraded logs and reports the start of an episode (see fail).
func (d *degrader) reportDegraded(err error, share float64) {
	d.t.logger.LogAttrs(context.Background(), slog.LevelWarn, "ratemonitor: shared store unreachable: pacing locally (degraded mode)",
		slog.String("store", d.name), slog.Float64("share", share), slog.Any("error", err))
	if d.t.obs != nil {
		d.t.obs.Observe(observe.Event{Kind: observe.Degraded, Store: d.name, Err: err})
	}
}

// probed ends a probe that started at start: ok means the shared store answered and the
// carry-over is in it.
//
// The return settles for the longest window, plus ProbeInterval, plus the slowest failed call
// to the shared store seen in the outage: a process still degraded may have granted locally
// until ProbeInterval and one such call after the store came back (its probe was not due
// yet), and those grants reach the shared store only when it returns; if it has no call to
// make, it never returns, and they must have aged out before this process goes by the shared
// store alone.
func (d *degrader) probed(ok bool, start time.Time) {
	d.mu.Lock()
	d.probing = false
	now := d.clock.Now()
	if !ok || d.state != degraded {
		if !ok {
			d.slowest = max(d.slowest, now.Sub(start))
		}
		d.nextProbe = now.Add(d.cfg.ProbeInterval)
		d.mu.Unlock()
		return
	}
	down := now.Sub(d.since)
	d.state, d.returned = settling, now
	d.settle = d.longest + d.cfg.ProbeInterval + d.slowest
	d.gen.Add(1)
	for d.inflight > 0 {
		d.idle.Wait() // local-only operations that began before the switch (memory: brief)
	}
	d.mu.Unlock()
	d.t.logger.LogAttrs(context.Background(), slog.LevelWarn, "ratemonitor: shared store answers again: back from degraded mode",
		slog.String("store", d.name), slog.Duration("degraded", down))
	if d.t.obs != nil {
		d.t.obs.Observe(observe.Event{Kind: observe.Recovered, Store: d.name, Wait: down})
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
func (d *degrader) probe(ctx context.Context, s *engine.Strategy, key string) bool {
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
func (d *degrader) carry(ctx context.Context, before map[carried]int) (map[carried]int, bool) {
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

// scaledFor returns s scaled to this episode's share.
func (d *degrader) scaledFor(s *engine.Strategy) *engine.Strategy {
	k := strategyKey(s)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.scaled == nil {
		d.scaled = map[string]*engine.Strategy{}
		d.share = d.episodeShare()
	}
	sc, ok := d.scaled[k]
	if !ok {
		sc = s.Scaled(d.share)
		d.scaled[k] = sc
	}
	return sc
}

// touched notes a local grant or record on key, for the carry-over.
func (d *degrader) touched(s, sc *engine.Strategy, key string) {
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
func (d *degrader) holdUntil(s *engine.Strategy) time.Time {
	if d.cfg.NoHoldBack {
		return time.Time{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.since.Add(s.Longest())
}

// burstErr says why a burst cannot fit this process's share.
func (d *degrader) burstErr(err error) error {
	return fmt.Errorf("ratemonitor: degraded mode (store %s unreachable) paces on this process's share of each limit: %w", d.name, err)
}

// localReserve reserves on the memory store at the share and, with hold, after the hold-back.
func (d *degrader) localReserve(ctx context.Context, s *engine.Strategy, key string, n int, hold bool) (engine.Result, error) {
	sc := d.scaledFor(s)
	if err := sc.CheckBurst(n); err != nil {
		return engine.Result{}, d.burstErr(err)
	}
	// A closed Transport answers ErrClosed before the hold-back's wait, so that its paced
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

// Package degrade is the degraded mode of ratemonitor's StoreErrorPolicy Degrade: a cache.Store
// that routes each operation to a shared store (Redis, SQLite, …) or, while that store is
// unreachable, to a memory store of its own at this process's share of each limit, then
// carries the local grants back when the shared store answers again
// (docs/fleet.md#degraded-mode). It knows nothing of the Transport: what it needs comes in
// Config.
package degrade

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

// State is a Store's state. Healthy: every operation goes to the shared store. Degraded: to
// the memory store, at the share, after the hold-back; a probe of the shared store at most
// every ProbeInterval. Settling: the shared store answers again; for settle (see probed) a
// reserve must be granted by both stores, so that this process stays at its share while
// others may still be degraded (see ratemonitor.Degrade).
type State int

// The states, in the order an outage goes through them.
const (
	Healthy State = iota
	Degraded
	Settling
)

// Config is what a Store needs: the degraded mode's settings (ratemonitor.DegradedConfig says
// what they mean; ProbeInterval is given, not defaulted), the longest window of its owner's
// rules, and where to report.
type Config struct {
	// Share, or else 1 ÷ Processes, or else 1 ÷ the shared store's count (cache.Traits.Processes), or
	// else 1, is the part of each limit this process may use while degraded (EpisodeShare).
	Share     float64
	Processes int
	// ProbeInterval is the least time between two probes of the shared store (positive).
	ProbeInterval time.Duration
	// NoHoldBack grants at once at an outage's start.
	NoHoldBack bool
	// Longest is the longest window of the owner's rules, margins included: the bulk of how
	// long a return settles (probed), and how long from an outage's start a new Sentinel
	// master goes unprobed (master.go).
	Longest time.Duration
	// Clock is the clock of both stores' instants (nil: clock.Real()). Logger receives the
	// Warn lines of an episode's start and end (nil: slog.Default()), and Observer, when not
	// nil, the Degraded and Recovered events; the memory store gets all three.
	Clock    clock.Clock
	Logger   *slog.Logger
	Observer observe.Observer
}

// Store is the store of a Transport under StoreErrorPolicy Degrade: a cache.Store that routes
// each operation to the shared store or to the degraded mode's memory store.
type Store struct {
	shared cache.Store
	clock  clock.Clock
	cfg    Config
	name   string     // the shared store's name for events
	fleet  func() int // nil when the store does not count its processes (cache.Traits.Processes)
	// sentinel names the master behind a Sentinel client (master.go), nil if the store cannot.
	sentinel sentinelStore

	// gen counts the switches between the stores: a slot reserved in one generation is given
	// back only in the same one (ratemonitor's Transport.releaseIn).
	gen atomic.Uint64

	mu        sync.Mutex
	local     *cache.Memory // made at the first outage (mem): a healthy Store runs no goroutine for it
	closed    bool          // Close was called: no memory store is made any more
	state     State
	since     time.Time // the instant (the Store's clock) the outage was seen; the hold-back starts there
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

// New returns a Store over shared, healthy: its memory store is made at the first outage.
func New(shared cache.Store, cfg Config) *Store {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Store{shared: shared, clock: cfg.Clock, cfg: cfg, name: StoreName(shared)}
	d.idle.L = &d.mu
	d.fleet = traitsOf(shared).Processes
	d.sentinel, _ = shared.(sentinelStore)
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

// EpisodeShare is the share for an outage starting now (see ratemonitor.DegradedConfig.Share).
func (d *Store) EpisodeShare() float64 {
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
func (d *Store) mode() (state State, probe bool, at seen) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at = seen{master: d.master, gen: d.gen.Load()}
	now := d.clock.Now()
	switch d.state {
	case Settling:
		if !now.Before(d.returned.Add(d.settle)) {
			// Both states give slots back on the shared store: the generation stays.
			d.state = Healthy
			d.used = nil
		}
	case Degraded:
		if !d.probing && !now.Before(d.nextProbe) {
			d.probing = true
			return Degraded, true, at
		}
	}
	return d.state, false, at
}

// State is the current state, without mode's side effects (no probe claimed, no return
// ended).
func (d *Store) State() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state
}

// IsDegraded reports whether the memory store serves operations now.
func (d *Store) IsDegraded() bool { return d.State() == Degraded }

// Gen is the generation: how often the Store has switched between the shared and the memory
// store. A slot reserved in one generation is given back only in the same one: after a switch
// its instant belongs to the other store.
func (d *Store) Gen() uint64 { return d.gen.Load() }

// Nap is how long to sleep for a wait of w: while degraded, at most ProbeInterval, so that a
// caller told to wait out the hold-back (a whole window) asks again, and meets the shared
// store, soon after it answers.
func (d *Store) Nap(w time.Duration) time.Duration {
	if d.IsDegraded() {
		return min(w, d.cfg.ProbeInterval)
	}
	return w
}

// seenNow is what an operation starting now would see (mode's third result), for one that has
// just made a successful probe: the probe noted the master and switched the generation.
func (d *Store) seenNow() seen {
	d.mu.Lock()
	defer d.mu.Unlock()
	return seen{master: d.master, gen: d.gen.Load()}
}

// fail enters the degraded state for err, from a call to the shared store that started at
// start, unless it is already degraded (one Degraded event per outage), and reports it.
func (d *Store) fail(err error, start time.Time) {
	d.mu.Lock()
	share, begun := d.failLocked(start)
	d.mu.Unlock()
	if begun {
		d.reportDegraded(err, share)
	}
}

// failLocked is fail's state change, with d.mu held: begun says that it started an episode
// (the caller reports it, after unlocking, with share).
func (d *Store) failLocked(start time.Time) (share float64, begun bool) {
	now := d.clock.Now()
	if d.state == Degraded {
		d.slowest = max(d.slowest, now.Sub(start))
		return 0, false
	}
	d.slowest = now.Sub(start)
	d.state, d.since, d.nextProbe = Degraded, now, now.Add(d.cfg.ProbeInterval)
	if share := d.EpisodeShare(); share != d.share || d.scaled == nil {
		d.share, d.scaled = share, map[string]*engine.Strategy{}
	}
	if d.used == nil {
		d.used = map[usedKey]usedEntry{}
	}
	d.gen.Add(1)
	return d.share, true
}

// reportDegraded logs and reports the start of an episode (see fail).
func (d *Store) reportDegraded(err error, share float64) {
	d.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "ratemonitor: shared store unreachable: pacing locally (degraded mode)",
		slog.String("store", d.name), slog.Float64("share", share), slog.Any("error", err))
	if d.cfg.Observer != nil {
		d.cfg.Observer.Observe(observe.Event{Kind: observe.Degraded, Store: d.name, Err: err})
	}
}

package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	gocachestore "github.com/eko/gocache/lib/v4/store"
	ristrettostore "github.com/eko/gocache/store/ristretto/v4"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Defaults of MemoryConfig.
const (
	DefaultMaxCost = 64 << 20 // bytes
	DefaultMaxKeys = 100_000
)

// entryOverhead approximates the bytes an entry holds besides its key and counters.
const entryOverhead = 160

// MemoryConfig configures NewMemory. Its zero value gives the defaults.
type MemoryConfig struct {
	// MaxCost bounds the memory held for keys' state, in approximate bytes (default 64 MiB).
	// A key with one minute rule at 1 s granularity costs a few hundred bytes to ~1.7 KiB; a
	// rule's state never exceeds (W/g + 1) × 24 bytes. The bound is enforced as keys are
	// admitted: one key whose state grows can pass it until the next key is admitted.
	MaxCost int64
	// MaxKeys is how many keys are expected to be live at once (default 100 000); ristretto
	// tracks the access frequency of ten times as many.
	MaxKeys int64
	// Clock is what every operation reads its instant from, under the key's lock, and what
	// decides whether evicted state still counted (default clock.Real()). A Transport over
	// this store sleeps on the same clock.
	Clock clock.Clock
	// OnEvictLive is called when state that still counted had to be evicted to stay within
	// MaxCost: that key's counts restart from zero, so its usage is under-reported until its
	// longest window has passed. It runs on ristretto's goroutine: keep it short, and do not
	// call the store from it or wait on anything that does.
	OnEvictLive func(key string)
	// Logger receives warnings about live evictions (default slog.Default()): at most one a
	// second, with how many keys were evicted live since the last one; each key is logged at
	// Debug level.
	Logger *slog.Logger
	// Observer, when set, receives a StoreError event (Store "memory") for each failed
	// operation and an EvictedLive event for each live eviction (see package observe).
	Observer observe.Observer
}

// MemoryStats counts the events that make the memory store's answers less than exact.
type MemoryStats struct {
	// EvictedLive is the number of keys whose live state was evicted (see OnEvictLive).
	EvictedLive int64
	// Rejected is the number of new keys ristretto refused to admit (each returned ErrFull).
	Rejected int64
}

// Memory is the default Store: state per key in process memory, in a gocache store over
// ristretto.
//
// ristretto buffers new keys and may drop or reject a write; Memory makes every update exact:
// a key's state is one object admitted once with a synchronous set and then updated in place
// under the key's own mutex, so no count is lost and a read right after a write sees it.
// A TTL (refreshed as the state's newest request moves) lets ristretto drop keys whose windows
// have all passed. Use NewMemory; the zero Memory is not usable.
type Memory struct {
	store   *ristrettostore.RistrettoStore[string, any]
	client  *ristretto.Cache[string, any]
	clock   clock.Clock
	onEvict func(string)
	logger  *slog.Logger
	seed    maphash.Seed

	// life is held for reading around every call that can reach ristretto's write buffer,
	// which panics once closed; Close holds it for writing.
	life   sync.RWMutex
	closed atomic.Bool
	insert [64]sync.Mutex // serialises the admission of new keys, by key hash

	evictedLive atomic.Int64
	rejected    atomic.Int64
	obs         observe.Observer
	logMu       sync.Mutex // guards lastLog and logged
	lastLog     time.Time  // wall time of the last live-eviction warning
	logged      int64      // evictedLive when it was written
}

// storeName is the memory store's name in observer events.
const storeName = "memory"

// fail reports a failed operation to the observer and returns err.
func (m *Memory) fail(ctx context.Context, op, key string, err error) error {
	if err != nil && m.obs != nil {
		return observe.StoreFailed(ctx, m.obs, storeName, op, key, err)
	}
	return err
}

// entry is one key's state: a counter per counter ID, guarded by mu.
type entry struct {
	mu       sync.Mutex
	key      string
	evicted  bool // set by ristretto's eviction; an evicted entry must not be updated
	ids      []string
	counters []strategy.Counter
	upstream strategy.Upstream  // pause and reported figures (Sync)
	strat    *strategy.Strategy // the strategy scratch was built for
	scratch  []strategy.Counter // counters of strat's slots, in slot order
	ttlUntil int64              // instant (caller's clock, ns) up to which ristretto keeps the entry
	cost     int                // cost last given to ristretto
}

// NewMemory returns a memory store. Close it to stop ristretto's goroutines.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if cfg.MaxCost == 0 {
		cfg.MaxCost = DefaultMaxCost
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxCost < 0 || cfg.MaxKeys < 0 || cfg.MaxKeys > 1<<40 {
		return nil, fmt.Errorf("ratemonitor: memory store: MaxCost %d must not be negative, and MaxKeys %d must be from 0 (the default) to 2^40", cfg.MaxCost, cfg.MaxKeys)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Memory{clock: cfg.Clock, onEvict: cfg.OnEvictLive, logger: cfg.Logger, seed: maphash.MakeSeed(), obs: cfg.Observer}
	client, err := ristretto.NewCache(&ristretto.Config[string, any]{
		NumCounters:        10 * cfg.MaxKeys,
		MaxCost:            cfg.MaxCost,
		BufferItems:        64,
		IgnoreInternalCost: true, // cost is our own byte estimate, so MaxCost is in bytes
		OnEvict:            m.evicted,
	})
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: memory store: %w", err)
	}
	m.client = client
	m.store = ristrettostore.NewRistretto[string, any](client)
	return m, nil
}

// Record implements Store.
func (m *Memory) Record(ctx context.Context, s *strategy.Strategy, key string, n int) error {
	if err := CheckCount(n); err != nil {
		return err
	}
	return m.fail(ctx, "record", key, m.do(ctx, s, key, true, func(cs []strategy.Counter, _ *strategy.Upstream, now time.Time) { s.Record(cs, now, n) }))
}

// Reserve implements Store.
func (m *Memory) Reserve(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Result, error) {
	if s != nil {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Result{}, err
		}
	}
	if err := CheckCount(n); err != nil {
		return strategy.Result{}, err
	}
	var res strategy.Result
	err := m.do(ctx, s, key, true, func(cs []strategy.Counter, up *strategy.Upstream, now time.Time) {
		res, _ = s.ReserveWith(cs, up, now, n)
	})
	return res, m.fail(ctx, "reserve", key, err)
}

// Admit implements Admitter.
func (m *Memory) Admit(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Decision, error) {
	if s != nil {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Decision{}, err
		}
	}
	var d strategy.Decision
	err := m.do(ctx, s, key, true, func(cs []strategy.Counter, _ *strategy.Upstream, now time.Time) {
		d, _ = s.Admit(cs, now, n)
	})
	return d, m.fail(ctx, "admit", key, err)
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, s *strategy.Strategy, key string, at time.Time, n int) error {
	if err := CheckCount(n); err != nil {
		return err
	}
	return m.fail(ctx, "release", key, m.do(ctx, s, key, false, func(cs []strategy.Counter, _ *strategy.Upstream, _ time.Time) { s.Release(cs, at, n) }))
}

// Peek implements Store. A key with no state is answered from empty counters, without admitting
// it.
func (m *Memory) Peek(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Snapshot, error) {
	if s != nil && n != 0 {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Snapshot{}, err
		}
	}
	var snap strategy.Snapshot
	err := m.do(ctx, s, key, false, func(cs []strategy.Counter, up *strategy.Upstream, now time.Time) {
		snap, _ = s.PeekWith(cs, up, now, n)
	})
	return snap, m.fail(ctx, "peek", key, err)
}

// Sync implements Syncer.
func (m *Memory) Sync(ctx context.Context, s *strategy.Strategy, key string, u strategy.Update) error {
	if s != nil {
		if err := s.CheckUpdate(u); err != nil {
			return err
		}
	}
	return m.fail(ctx, "sync", key, m.do(ctx, s, key, true, func(cs []strategy.Counter, up *strategy.Upstream, now time.Time) { s.Sync(cs, up, now, u) }))
}

// Clock returns the clock the store reads instants from (MemoryConfig.Clock).
func (m *Memory) Clock() clock.Clock { return m.clock }

// Stats returns the counts of live evictions and rejected keys so far.
func (m *Memory) Stats() MemoryStats {
	return MemoryStats{EvictedLive: m.evictedLive.Load(), Rejected: m.rejected.Load()}
}

// Close stops ristretto's goroutines and drops all state, after the operations under way have
// finished. It is safe to call more than once; operations after Close return ErrClosed.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.life.Lock()
	defer m.life.Unlock()
	m.client.Close()
	return nil
}

// do runs fn on the counters of key's slots under s, with the key's lock held and the instant
// read from the store's clock under that lock. A key with no state is admitted when write is
// set, and otherwise answered from empty counters.
func (m *Memory) do(ctx context.Context, s *strategy.Strategy, key string, write bool, fn func([]strategy.Counter, *strategy.Upstream, time.Time)) error {
	if s == nil {
		return errors.New("ratemonitor: memory store: nil strategy")
	}
	// ristretto's channels panic once it is closed: every call into it runs under life.
	m.life.RLock()
	defer m.life.RUnlock()
	if m.closed.Load() {
		return ErrClosed
	}
	var stale *entry
	for range 3 {
		e, ok := m.get(ctx, key)
		if !ok || e == stale {
			if !write {
				cs := s.NewCounters()
				fn(cs, &strategy.Upstream{}, m.clock.Now())
				return nil
			}
			var err error
			if e, err = m.admit(ctx, s, key, stale); err != nil {
				return err
			}
		}
		e.mu.Lock()
		if e.evicted {
			e.mu.Unlock()
			stale = e
			continue
		}
		now := m.clock.Now()
		cs := e.countersFor(s)
		// An injected clock may have been stepped back: rebase all of the key's counters
		// (clock.Real never goes back).
		if d := strategy.Rebase(e.counters, &e.upstream, now); d != 0 && e.ttlUntil != 0 {
			e.ttlUntil += int64(d)
		}
		fn(cs, &e.upstream, now)
		cost, ttl, refresh := e.maintain(s, now)
		e.mu.Unlock()
		if refresh {
			m.refresh(ctx, e, cost, ttl)
		}
		return nil
	}
	return fmt.Errorf("ratemonitor: memory store: the state of key %q was evicted three times while being updated; raise MaxCost", key)
}

// admit puts a new entry for key in the cache, unless another caller has meanwhile put one
// other than stale there, and returns the entry in the cache.
func (m *Memory) admit(ctx context.Context, s *strategy.Strategy, key string, stale *entry) (*entry, error) {
	mu := &m.insert[maphash.String(m.seed, key)%uint64(len(m.insert))]
	mu.Lock()
	defer mu.Unlock()
	if e, ok := m.get(ctx, key); ok && e != stale {
		return e, nil
	}
	e := &entry{key: key, cost: entryOverhead + len(key)}
	ttl := slack(s)
	e.ttlUntil = m.clock.Now().UnixNano() + int64(ttl)
	opts := []gocachestore.Option{gocachestore.WithCost(int64(e.cost)), gocachestore.WithExpiration(ttl), gocachestore.WithSynchronousSet()}
	if err := m.store.Set(ctx, key, e, opts...); err != nil {
		// ristretto drops a set when its buffer is full; after a flush there is room.
		m.client.Wait()
		if err := m.store.Set(ctx, key, e, opts...); err != nil {
			return nil, fmt.Errorf("ratemonitor: memory store: writing key %q: %w", key, err)
		}
	}
	if got, ok := m.get(ctx, key); !ok || got != e {
		m.rejected.Add(1)
		return nil, fmt.Errorf("%w: ristretto did not admit key %q within MaxCost; nothing was recorded", ErrFull, key)
	}
	return e, nil
}

// get reads key's entry from the gocache store.
func (m *Memory) get(ctx context.Context, key string) (*entry, bool) {
	v, err := m.store.Get(ctx, key)
	if err != nil {
		return nil, false
	}
	e, ok := v.(*entry)
	// ristretto identifies keys by two 64-bit hashes; the stored key settles a collision.
	return e, ok && e.key == key
}

// refresh rewrites e in ristretto with a new cost and TTL (an update in place: not buffered).
// If ristretto refuses, the entry is marked for another try on its next update.
func (m *Memory) refresh(ctx context.Context, e *entry, cost int, ttl time.Duration) {
	if err := m.store.Set(ctx, e.key, e, gocachestore.WithCost(int64(cost)), gocachestore.WithExpiration(ttl)); err != nil {
		e.mu.Lock()
		e.ttlUntil, e.cost = 0, 0
		e.mu.Unlock()
	}
}

// String keeps fmt (gocache formats values into its errors) from reading the entry's fields
// without its lock.
func (e *entry) String() string { return "rate-limit state of key " + strconv.Quote(e.key) }

// evicted is ristretto's OnEvict: it marks the entry so no caller updates it any more, and
// reports it when it still held counts.
func (m *Memory) evicted(item *ristretto.Item[any]) {
	e, ok := item.Value.(*entry)
	if !ok || m.closed.Load() {
		return
	}
	e.mu.Lock()
	e.evicted = true
	live := strategy.Expiry(e.counters).After(m.clock.Now()) || e.upstream.PausedUntil.After(m.clock.Now())
	e.mu.Unlock()
	if !live {
		return
	}
	total := m.evictedLive.Add(1)
	m.logEviction(e.key, total)
	if m.obs != nil {
		m.obs.Observe(observe.Event{Kind: observe.EvictedLive, Store: storeName, Key: e.key})
	}
	if m.onEvict != nil {
		m.onEvict(e.key)
	}
}

// evictionLogEvery is the least time between two warnings about live evictions.
const evictionLogEvery = time.Second

// logEviction logs key's eviction at Debug, and a warning with the count of live evictions
// since the last warning at most once per evictionLogEvery (wall time), so that a flood of
// keys cannot flood the log. total is evictedLive after this eviction.
func (m *Memory) logEviction(key string, total int64) {
	m.logger.Debug("ratemonitor: live rate-limit state evicted from the memory store", "key", key)
	now := time.Now()
	m.logMu.Lock()
	if !m.lastLog.IsZero() && now.Sub(m.lastLog) < evictionLogEvery {
		m.logMu.Unlock()
		return
	}
	count := total - m.logged
	m.lastLog, m.logged = now, total
	m.logMu.Unlock()
	m.logger.Warn("ratemonitor: live rate-limit state evicted from the memory store; those keys' counts restart at zero. Raise MaxCost.",
		"evicted", count, "last_key", key, "evicted_total", total)
}

// countersFor returns the counters of s's slots, creating the missing ones.
func (e *entry) countersFor(s *strategy.Strategy) []strategy.Counter {
	if e.strat == s {
		return e.scratch
	}
	e.scratch = e.scratch[:0]
	for j := range s.Slots() {
		id := s.CounterID(j)
		var c strategy.Counter
		for i, have := range e.ids {
			if have == id {
				c = e.counters[i]
				break
			}
		}
		if c == nil {
			c = s.NewCounter(j)
			e.ids = append(e.ids, id)
			e.counters = append(e.counters, c)
		}
		e.scratch = append(e.scratch, c)
	}
	e.strat = s
	return e.scratch
}

// maintain decides whether ristretto must be told a new cost (the counters grew) or a later TTL
// (the newest request now counts past the current one).
func (e *entry) maintain(s *strategy.Strategy, now time.Time) (cost int, ttl time.Duration, refresh bool) {
	cost = entryOverhead + len(e.key)
	for _, c := range e.counters {
		cost += c.Cost()
	}
	exp := strategy.Expiry(e.counters)
	if e.upstream.PausedUntil.After(exp) {
		exp = e.upstream.PausedUntil // a pause outlives the counts it guards
	}
	expiry := max(exp.UnixNano(), now.UnixNano())
	if exp.IsZero() {
		expiry = now.UnixNano() // nothing recorded: keep the entry one slack from now
	}
	if cost <= e.cost && expiry <= e.ttlUntil {
		return 0, 0, false
	}
	ttl = time.Duration(expiry-now.UnixNano()) + slack(s)
	e.cost, e.ttlUntil = cost, now.UnixNano()+int64(ttl)
	return cost, ttl, true
}

// slack is how long past its last counted instant an entry is kept: at least a minute, so that
// the TTL is refreshed about once per window and ristretto's wall-clock TTL cannot drop state
// that a caller's clock still counts.
func slack(s *strategy.Strategy) time.Duration { return max(s.Longest(), time.Minute) }

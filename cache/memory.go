package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	gocachestore "github.com/eko/gocache/lib/v4/store"
	ristrettostore "github.com/eko/gocache/store/ristretto/v4"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/realclock"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/internal/storeobs"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Defaults of MemoryConfig.
const (
	defaultMaxCost = 64 << 20 // bytes
	defaultMaxKeys = 100_000
)

// MemoryConfig configures NewMemory. Its zero value gives the defaults.
type MemoryConfig struct {
	// MaxCost bounds the heap held for keys' state, in bytes (default 64 MiB). Each key is
	// charged the heap it really holds: about 504 bytes for a key with one minute rule and a
	// few requests, so 64 MiB holds about 133 000 such keys. To make room for a new key, keys
	// below their limits are evicted (OnEvictLive); keys at or over a limit, or paused, are
	// never evicted while others can go, and a new key gets ErrFull only when every byte is
	// held by such keys. Besides MaxCost, the empty store holds 256 KiB plus 40 to 55 bytes per
	// MaxKeys. See docs/stores.md#memory-the-default.
	MaxCost int64
	// MaxKeys is how many keys are expected to be live at once (default 100 000); ristretto
	// tracks the access frequency of ten times as many.
	MaxKeys int64
	// Clock is what every operation reads its instant from, and what decides whether evicted
	// state still counted (default clock.Real()). A Transport over this store sleeps on the
	// same clock. clock.Real() is read just before the key's lock is taken (a clock read is
	// about 40 ns on a VM, and out of the lock it does not hold up other goroutines on the key),
	// and the operation is dated at the later of that reading and the instant the key's last
	// operation was dated at, so a key's instants follow the order of its lock. Any other clock
	// is read under the lock and the operation dated at its reading (a manual clock's readings
	// then match the operations one for one; a reading behind the key's latest instant is
	// answered at that instant, and one more than engine.StepTolerance behind rebases the key).
	Clock clock.Clock
	// OnEvictLive is called when state that still counted had to be evicted to stay within
	// MaxCost: that key's counts restart from zero, so its usage is under-reported until its
	// longest window has passed. It runs on ristretto's goroutine, or on that of the
	// operation whose new key needed the room, with store locks held: keep it short, and do
	// not call the store from it or wait on anything that does.
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
	// Rejected is the number of new keys refused with ErrFull: only when every byte of
	// MaxCost is held by keys at or over their limits.
	Rejected int64
}

// Memory is the default Store: state per key in process memory, in a gocache store over
// ristretto.
//
// ristretto buffers new keys and may drop or reject a write; Memory makes every update exact:
// a key's state is one object admitted once with a synchronous set and then updated in place
// under the key's own mutex, so no count is lost and a read right after a write sees it. An
// operation on a key the store holds finds that object in the store's own lock-free index and
// takes no other lock; ristretto still decides admission and eviction, and hears of every
// 16th operation on a key (a Get), which keeps its frequency estimates.
// ristretto's TTLs are not used (they run on the wall clock, and their expiry maps hold memory
// for every key admitted within a TTL): a sweep drops the keys whose windows have all passed,
// on the store's clock. A key at or over a limit (or paused) is held out of ristretto's reach,
// within the same MaxCost, so that evicting it cannot give its client a full allowance again
// (docs/stores.md#memory-the-default). Use NewMemory; the zero Memory is not usable.
type Memory struct {
	store   *ristrettostore.RistrettoStore[string, any]
	client  *ristretto.Cache[string, any]
	clock   clock.Clock
	real    bool // clock is clock.Real(): update reads it before the key's lock (see MemoryConfig.Clock)
	onEvict func(string)
	logger  *slog.Logger
	seed    maphash.Seed

	// life is held for reading around every call that can reach ristretto's buffers, which
	// panic once closed, and by the operations that change the tiers; Close and compact hold
	// it for writing. An operation on a key found in the index takes it only when it must
	// reach ristretto (see do).
	life   sync.RWMutex
	closed atomic.Bool
	tiers  // pinned keys, the list of keys in ristretto, their locks (memory_tier.go)

	leases leases      // in-flight leases (memory_lease.go)
	limits limitValues // PutLimits' values (memory_limits.go)

	sharing Sharing // the Transports and counter claims over this store (Describe)

	evictedLive atomic.Int64
	rejected    atomic.Int64
	// general and fastHits are for tests: general makes update skip fastGrant, and fastHits,
	// when set, counts the operations fastGrant ran.
	general  bool
	fastHits *atomic.Int64
	obs      observe.Observer
	logMu    sync.Mutex // guards lastLog and logged
	lastLog  time.Time  // wall time of the last live-eviction warning
	logged   int64      // evictedLive when it was written
}

// storeName is the memory store's name in observer events.
const storeName = "memory"

// fail reports a failed operation to the observer and returns err.
func (m *Memory) fail(ctx context.Context, op, key string, err error) error {
	if err != nil && m.obs != nil {
		return storeobs.Failed(ctx, m.obs, storeName, op, key, err)
	}
	return err
}

// entry is one key's state: a counter per counter ID, guarded by mu. Its fields are laid out
// so that it takes 128 bytes (one size class); what few keys need (a second strategy with
// another slot order, a pause or reported figures) is behind more.
type entry struct {
	mu sync.Mutex
	// evicted is set by ristretto's eviction or a drop: an evicted entry must not be updated.
	evicted bool
	// pinned is set while the entry is in its shard's pinned map rather than in ristretto;
	// it changes only with both the shard's lock and the entry's lock held.
	pinned bool
	// dropped is set (under the entry's lock) when ristretto evicts the entry while it is
	// pinned: an unpin under way then knows that ristretto did not keep it.
	dropped bool
	// pinning is set, with pinned, from when an operation put the entry in the pinned map to
	// when finishPin has taken it out of ristretto and counted it in the pinned tier.
	pinning bool
	// listed places the entry on the list of entries in ristretto (listMu), with prev, next.
	listed bool
	// flags holds four flags (one byte, so that the entry stays 128 bytes). refusing is set
	// by a Reserve of 1 under base that was refused on a pinned key, when the wait it told
	// ends at limitUntil and base is refusable: until limitUntil, with nothing else done to
	// the key, a Reserve of 1 under base is refused with the wait limitUntil − now, which
	// update answers without the counters (on a key at its limit, the refusals are most of
	// the traffic); every other operation clears it. skipped is set when such a refusal was
	// answered without the counters: catchUp brings them to e.hw before anything else reads
	// them. fused is set for good when the entry is an entryLogs: counters' first array of two
	// lies inside the entry's object (heapCost), and so do two log buffers; oneLog when it is an
	// entryLog, with one (idleBufBytes).
	flags uint8
	// hits counts operations found in the index, for the sampled Gets (getSample).
	hits uint8
	// room is how many more requests certainly fit every rule of base (a refusable strategy)
	// beyond what was recorded since it was counted, at most 255; 0 when not known. While a
	// record leaves at least 1, the key is not at its limit (nothing but records takes room, and
	// time only frees it), and atLimit need not read the counters. Only records under base
	// spend it; another strategy's operation, an Admit, a Sync or a rebase forgets it.
	room uint8
	hash uint32 // keyHash(key): shard and index slot
	cost int32  // cost last given to ristretto (or counted in the pinned tier), bytes
	key  string
	// hw is an upper bound of the latest instant (store's clock, ns) the key's state has
	// seen: an operation whose clock reads more than StepTolerance behind it rebases. On
	// clock.Real(), which never goes back, it is the latest instant an operation on the key was
	// dated at, and no operation is dated before it (update).
	hw int64
	// limitUntil is the instant (store's clock, ns) up to which a strategy found the key at
	// its limit (see atLimit); set under the entry's lock.
	limitUntil int64
	// base is the strategy the first counters were made for: counters[:base.Slots()] are its
	// slots, in its order. It is also the strategy last used unless more.last says otherwise.
	base     *engine.Strategy
	counters []engine.Counter
	// inline holds the counter of a key whose first strategy has one slot (counters is then
	// inline[:1:1]): no slice of its own to allocate, nor to miss in the cache.
	inline     [1]engine.Counter
	more       *entryMore
	prev, next *entry
}

// The flags of entry.flags.
const (
	refusing uint8 = 1 << iota
	skipped
	fused
	oneLog
)

// entryMore is the part of an entry few keys need, allocated on first use.
type entryMore struct {
	last       *engine.Strategy // the strategy last used on the key when it is not base
	ids        []string         // counter ID of each of counters, once a strategy other than base uses the key
	scratchFor *engine.Strategy // the strategy scratch holds the slots of
	scratch    []engine.Counter // counters of scratchFor's slots, in slot order
	up         engine.Upstream  // pause and reported figures (Sync)
	// synced is the longest window of a strategy that gave the key figures (Sync): the sweep
	// keeps the entry that long past its last instant, whatever strategy came last.
	synced time.Duration
}

// upstream returns e's Upstream, or nil while nothing was said about the key.
func (e *entry) upstream() *engine.Upstream {
	if e.more == nil {
		return nil
	}
	return &e.more.up
}

// pausedUntil is the end of e's pause (zero when never paused).
func (e *entry) pausedUntil() time.Time {
	if e.more == nil {
		return time.Time{}
	}
	return e.more.up.PausedUntil
}

// NewMemory returns a memory store. Close it to stop ristretto's goroutines.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if cfg.MaxCost == 0 {
		cfg.MaxCost = defaultMaxCost
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = defaultMaxKeys
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
	m := &Memory{clock: cfg.Clock, real: realclock.Is(cfg.Clock), onEvict: cfg.OnEvictLive, logger: cfg.Logger, seed: maphash.MakeSeed(), obs: cfg.Observer}
	m.maxCost = cfg.MaxCost
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
	m.startJanitor()
	return m, nil
}

// op says what an operation may do to a key's state besides running its function.
type op struct {
	// write admits a key that has no state (Record, Reserve, Admit, Sync); without it such a
	// key is answered from empty counters.
	write bool
	// sync gives the function an Upstream to write to (Sync); the others get nil until the key
	// has one.
	sync bool
	// at is an instant (ns) the function hands the counters besides the store's own (Release's
	// at), so that the entry's latest instant stays an upper bound; 0 when none.
	at int64
	// n is the requests the function records (Record's n; a Reserve's n when it is allowed).
	n int
	// res, for a Reserve, is where the function puts its Result: what it recorded, and for a
	// burst of 1 a refusal of a pinned key that may be repeated without the counters
	// (entry.refusing).
	res *engine.Result
	// other is set for the operations that may record what the store cannot tell (Admit,
	// Sync): the entry's room is forgotten.
	other bool
	// kind names a Record or a Reserve, which applyAt runs on int64 instants itself
	// (engine.Strategy.Nanos) instead of calling the operation's function; 0 for the others.
	kind uint8
}

// The kinds of op.kind.
const (
	opRecord uint8 = 1 + iota
	opReserve
)

// Record implements Store.
func (m *Memory) Record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	if err := storecheck.Count(n); err != nil {
		return err
	}
	return m.fail(ctx, "record", key, m.do(ctx, s, key, &op{write: true, n: n, kind: opRecord}, func(cs []engine.Counter, _ *engine.Upstream, now time.Time) { s.Record(cs, now, n) }))
}

// Reserve implements Store.
func (m *Memory) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	if s != nil {
		if err := s.CheckBurst(n); err != nil {
			return engine.Result{}, err
		}
	}
	if err := storecheck.Count(n); err != nil {
		return engine.Result{}, err
	}
	var res engine.Result
	o := &op{write: true, n: n, res: &res, kind: opReserve}
	err := m.do(ctx, s, key, o, func(cs []engine.Counter, up *engine.Upstream, now time.Time) {
		res, _ = s.Reserve(cs, up, now, n)
	})
	return res, m.fail(ctx, "reserve", key, err)
}

// Admit implements Admitter.
func (m *Memory) Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error) {
	if s != nil {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Decision{}, err
		}
	}
	var d strategy.Decision
	err := m.do(ctx, s, key, &op{write: true, other: true}, func(cs []engine.Counter, _ *engine.Upstream, now time.Time) {
		d, _ = s.Admit(cs, now, n)
	})
	return d, m.fail(ctx, "admit", key, err)
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	if err := storecheck.Count(n); err != nil {
		return err
	}
	return m.fail(ctx, "release", key, m.do(ctx, s, key, &op{at: at.UnixNano()}, func(cs []engine.Counter, _ *engine.Upstream, _ time.Time) { s.Release(cs, at, n) }))
}

// Peek implements Store. A key with no state is answered from empty counters, without admitting
// it.
func (m *Memory) Peek(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Snapshot, error) {
	if s != nil && n != 0 {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Snapshot{}, err
		}
	}
	var snap strategy.Snapshot
	err := m.do(ctx, s, key, &op{}, func(cs []engine.Counter, up *engine.Upstream, now time.Time) {
		snap, _ = s.Peek(cs, up, now, n)
	})
	return snap, m.fail(ctx, "peek", key, err)
}

// Sync implements Syncer.
func (m *Memory) Sync(ctx context.Context, s *engine.Strategy, key string, u engine.Update) error {
	if s != nil {
		if err := s.CheckUpdate(u); err != nil {
			return err
		}
	}
	return m.fail(ctx, "sync", key, m.do(ctx, s, key, &op{write: true, sync: true, other: true}, func(cs []engine.Counter, up *engine.Upstream, now time.Time) { s.Sync(cs, up, now, u) }))
}

// Describe implements Describer: the store is in this process, on MemoryConfig.Clock, with a
// Sharing of its own.
func (m *Memory) Describe() Traits {
	return Traits{Clock: m.clock, InProcess: true, Sharing: &m.sharing}
}

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
	m.stopJanitor()
	m.life.Lock()
	m.client.Close()
	m.life.Unlock()
	// Operations on keys found in the index take neither life nor a shard's lock: waiting for
	// each entry's lock once waits for those under way (the later ones see closed under it).
	// Emptying the index and the tiers lets their state go even while m is still referenced.
	for i := range m.shard {
		sh := &m.shard[i]
		sh.mu.Lock()
		for _, e := range sh.ix.clear() {
			e.mu.Lock()
			//nolint:staticcheck // an empty critical section: waiting for the operation under way is the point
			e.mu.Unlock()
		}
		sh.pinMu.Lock()
		sh.pinned = nil
		sh.pinMu.Unlock()
		sh.mu.Unlock()
	}
	m.limits.mu.Lock()
	m.limits.m = nil
	m.limits.mu.Unlock()
	m.listMu.Lock()
	m.head, m.tail = nil, nil
	m.listMu.Unlock()
	return nil
}

// getSample is how often (in operations on one entry held in ristretto) an operation found in
// the index also reads the key from ristretto, and moves it to the tail of the list of entries
// in ristretto: that Get is what feeds ristretto's TinyLFU the key's frequency, so that its
// evictions still spare the keys in use, at a sixteenth of the cost of reading every time; and
// the move keeps a key in use from the head of the list, where a refused admission takes its
// victim (dropOldest).
const getSample = 16

// do runs fn on the counters of key's slots under s, with the key's lock held, at an instant
// read from the store's clock (see MemoryConfig.Clock). A key with no state is admitted when
// o.write is set, and otherwise answered from empty counters.
//
// A key the store holds is found in the index (memory_index.go) and updated without life or a
// shard's lock; only what reaches ristretto (an admission, a new cost, a move between the
// tiers, a sampled Get) takes life, which Close holds for writing.
func (m *Memory) do(ctx context.Context, s *engine.Strategy, key string, o *op, fn func([]engine.Counter, *engine.Upstream, time.Time)) error {
	if s == nil {
		return errors.New("ratemonitor: memory store: nil strategy")
	}
	h := m.keyHash(key)
	sh := &m.shard[h%shards]
	if e := sh.ix.find(h, key); e != nil {
		if done, err := m.update(ctx, s, e, o, fn, false); done {
			return err
		}
	}
	err := m.doLive(ctx, s, sh, h, key, o, fn)
	m.maybeCompact()
	return err
}

// doLive is do's slow path, under life: a key not in the index, or whose entry was evicted.
func (m *Memory) doLive(ctx context.Context, s *engine.Strategy, sh *shard, h uint32, key string, o *op, fn func([]engine.Counter, *engine.Upstream, time.Time)) error {
	// ristretto's channels panic once it is closed: every call into it runs under life.
	m.life.RLock()
	defer m.life.RUnlock()
	if m.closed.Load() {
		return ErrClosed
	}
	var stale *entry
	for range 3 {
		e := sh.ix.find(h, key)
		if e == nil || e == stale {
			if !o.write {
				cs := s.NewCounters()
				fn(cs, nil, m.clock.Now())
				return nil
			}
			var err error
			var applied bool
			if e, applied, err = m.admit(ctx, s, sh, h, key, stale, o, fn); err != nil || applied {
				return err
			}
		}
		if done, err := m.update(ctx, s, e, o, fn, true); done {
			return err
		}
		stale = e
	}
	return fmt.Errorf("ratemonitor: memory store: the state of key %q was evicted three times while being updated; raise MaxCost", key)
}

// update runs fn on e, an entry the store holds, under e.mu, and then does what the new state
// asks of the tiers: tell ristretto a grown cost, pin or unpin. It reports done false, having
// done nothing, when e has been evicted. The caller holds life for reading when underLife is
// set; otherwise update takes it only when it must reach ristretto, and then does nothing
// there once the store is closed (the operation itself is done: only its bookkeeping goes).
func (m *Memory) update(ctx context.Context, s *engine.Strategy, e *entry, o *op, fn func([]engine.Counter, *engine.Upstream, time.Time), underLife bool) (done bool, err error) {
	var ns int64
	if m.real {
		ns = realclock.Nanos() // before the lock, which then dates the operation (MemoryConfig.Clock)
	}
	e.mu.Lock()
	if e.evicted {
		e.mu.Unlock()
		return false, nil
	}
	if m.closed.Load() {
		e.mu.Unlock()
		return true, ErrClosed
	}
	var now time.Time
	if m.real {
		ns = max(ns, e.hw)
		now = time.Unix(0, ns)
	} else {
		now = m.clock.Now()
		ns = now.UnixNano()
	}
	if o.n == 1 && o.res != nil && e.flags&refusing != 0 && s == e.base && e.pinned && !e.pinning {
		// A Reserve of 1 refused before, with nothing recorded, released or said since: it is
		// refused again, with the wait shrunk by the time passed (see refusing).
		if ns >= e.hw && ns < e.limitUntil {
			*o.res = engine.Result{Wait: time.Duration(e.limitUntil - ns)}
			e.hw = ns
			e.flags |= skipped
			e.mu.Unlock()
			return true, nil
		}
	}
	// The repeated refusal above is for pinned keys, the fast grant for keys in ristretto.
	if cost, refresh, sample, ok := m.fastGrant(s, e, o, now, ns); ok {
		e.mu.Unlock()
		if refresh || sample {
			m.settle(ctx, e, false, false, refresh, sample, cost, underLife)
		}
		return true, nil
	}
	m.applyAt(e, s, o, fn, now, ns)
	e.spend(s, o)
	old := e.cost
	cost, refresh := e.maintain(s, now)
	pinned := e.pinned
	// An entry still being pinned is not counted in the pinned tier yet: finishPin counts
	// its whole cost, growth included.
	if pinned && !e.pinning && e.cost != old {
		m.addPinned(0, int(e.cost-old))
	}
	var pin, unpin bool
	if o.write && e.atLimitNs(s, now, ns) != pinned {
		pin = !pinned && m.startPin(e) // under e.mu: no eviction can come first
		unpin = pinned
	}
	sample := false
	if !pinned {
		e.hits++
		sample = e.hits%getSample == 0
	}
	refresh = refresh && !pinned
	e.flags &^= refusing
	if o.n == 1 && o.res != nil && !o.res.Allowed && s == e.base && e.pinned && !e.pinning &&
		e.limitUntil == ns+int64(o.res.Wait) && refusable(s) {
		e.flags |= refusing
	}
	e.mu.Unlock()
	if pin || unpin || refresh || sample {
		m.settle(ctx, e, pin, unpin, refresh, sample, cost, underLife)
	}
	return true, nil
}

// settle does what an update asked of the tiers once the key's lock is released: finish a pin,
// unpin, tell ristretto the new cost, or read the key from it (the sampled Get). It takes life
// unless the caller holds it (underLife), and does nothing once the store is closed.
func (m *Memory) settle(ctx context.Context, e *entry, pin, unpin, refresh, sample bool, cost int, underLife bool) {
	if !underLife {
		m.life.RLock()
		defer m.life.RUnlock()
		if m.closed.Load() {
			return
		}
	}
	switch {
	case pin:
		m.finishPin(e)
	case unpin:
		m.unpin(ctx, e)
	case refresh:
		m.refresh(ctx, e, cost)
	}
	if sample {
		m.client.Get(e.key)
		m.touch(e)
	}
}

// applyOp runs operation o (fn, unless applyAt runs it itself) on e's counters for s at the
// store's instant, and returns that instant. The caller holds e.mu, or e is not yet in the
// store.
func (m *Memory) applyOp(e *entry, s *engine.Strategy, o *op, fn func([]engine.Counter, *engine.Upstream, time.Time)) time.Time {
	now := m.clock.Now()
	m.applyAt(e, s, o, fn, now, now.UnixNano())
	return now
}

// applyAt is applyOp at the instant now (ns: now.UnixNano()), from the store's clock (under
// e.mu, or for clock.Real() just before it and no earlier than e.hw: update).
func (m *Memory) applyAt(e *entry, s *engine.Strategy, o *op, fn func([]engine.Counter, *engine.Upstream, time.Time), now time.Time, ns int64) {
	e.catchUp()
	// An injected clock may have been stepped back: rebase all of the key's counters (clock.Real
	// never goes back). e.hw is never below the latest instant the key has seen, so a clock
	// that reads at most StepTolerance behind it needs no rebase (Rebase would find none).
	if ns < e.hw-int64(engine.StepTolerance) {
		if d := engine.Rebase(e.counters, e.upstream(), now); d != 0 && e.limitUntil != 0 {
			e.limitUntil += int64(d)
		}
		e.room = 0
		e.hw = e.seen(ns)
	}
	if o.sync {
		if e.more == nil {
			e.more = &entryMore{}
		}
		e.more.synced = max(e.more.synced, s.Longest())
	}
	cs, up := e.countersFor(s), e.upstream()
	switch {
	case o.kind == opRecord && s.Nanos():
		s.RecordNanos(cs, ns, o.n) // fn's s.Record, on int64 instants
	case o.kind == opReserve && up == nil && s.Nanos():
		// fn's s.Reserve (never paused), on int64 instants; the burst passed CheckBurst.
		reserveNanos(s, cs, o, now, ns)
	default:
		fn(cs, up, now)
	}
	// What fn handed the counters is now or their latest instant (or o.at): e.hw stays an
	// upper bound of what they have seen, for the rebase check above. On the real clock, which
	// never goes back and so never rebases, e.hw dates the next operation instead (update): a
	// Release's at ahead of the clock (an instant this store did not give) must not move it, or
	// every later operation would be dated in the future and count the window's requests as
	// gone (TestReleaseAheadOfRealClockGrantsNothingEarly).
	if m.real {
		e.hw = max(e.hw, ns)
	} else {
		e.hw = max(e.hw, ns, o.at)
	}
}

// reserveNanos runs Reserve o (burst o.n, already checked) on cs at now (ns: now.UnixNano())
// through the strategy's int64 path, and puts its Result in o.res as Strategy.Reserve would
// give it: At is now itself when the grant is dated at now.
func reserveNanos(s *engine.Strategy, cs []engine.Counter, o *op, now time.Time, ns int64) {
	ok, wait, at := s.ReserveNanos(cs, ns, o.n)
	switch {
	case !ok:
		*o.res = engine.Result{Wait: wait}
	case at == ns:
		*o.res = engine.Result{Allowed: true, At: now}
	default:
		*o.res = engine.Result{Allowed: true, At: time.Unix(0, at)}
	}
}

// refusable reports whether a refusal of one request under s may be repeated from the entry
// alone (entry.refusing): under the rolling window, unsmoothed, the wait for one request while
// nothing is recorded or released is the instant the oldest bucket that must go stops counting
// (or the pause's end) minus now: it shrinks exactly as time passes.
func refusable(s *engine.Strategy) bool {
	return s.Algorithm() == rollingAlgorithm && !s.Smoothing()
}

// rollingAlgorithm is the rolling window's engine.Algorithm (an empty struct: equal to itself
// only).
var rollingAlgorithm = func() engine.Algorithm {
	s, _ := rollingwindow.New(strategy.Rule{Limit: 1, Window: time.Second})
	return s.Algorithm()
}()

// spend takes what operation o recorded under s from e's room (see entry.room), or forgets
// the room when o may have recorded what the store cannot tell. The caller holds e.mu.
func (e *entry) spend(s *engine.Strategy, o *op) {
	if e.room == 0 {
		return
	}
	rec := o.n
	if o.res != nil && !o.res.Allowed {
		rec = 0
	}
	if o.other || s != e.base || rec >= int(e.room) {
		e.room = 0
		return
	}
	e.room -= uint8(rec)
}

// roomOf returns how many more requests fit every rule of s at now, from the counters cs of its
// slots: the least of EffectiveLimit − Used. For a refusable s a burst of 1 fits (Wait is 0)
// exactly when it is at least 1. The caller holds e.mu.
func roomOf(s *engine.Strategy, cs []engine.Counter, now time.Time, ns int64) int {
	room := math.MaxInt
	if s.Nanos() {
		for i := range s.NumRules() {
			room = min(room, s.Rule(i).EffectiveLimit()-s.UsedNanos(cs, s.SlotOf(i), ns))
		}
		return room
	}
	for i := range s.NumRules() {
		room = min(room, s.Rule(i).EffectiveLimit()-cs[s.SlotOf(i)].Used(now))
	}
	return room
}

// catchUp brings base's counters to the latest instant the refusals repeated without them
// (refusing) were answered at, as those refusals would have: a rolling-window log moves its
// time to the latest instant a query names, dropping what stops counting, and a later query
// dated earlier is answered at that latest instant. The caller holds e.mu.
func (e *entry) catchUp() {
	if e.flags&skipped == 0 {
		return
	}
	e.flags &^= skipped
	at := time.Unix(0, e.hw)
	for _, c := range e.counters[:e.base.Slots()] {
		c.Used(at)
	}
}

// seen returns the latest instant (ns) e's state has seen, or ns if later: what Rebase
// compares the clock with. The caller holds e.mu.
func (e *entry) seen(ns int64) int64 {
	for _, c := range e.counters {
		if l := c.Latest(); !l.IsZero() {
			ns = max(ns, l.UnixNano())
		}
	}
	if up := e.upstream(); up != nil {
		if !up.PausedAt.IsZero() {
			ns = max(ns, up.PausedAt.UnixNano())
		}
		for _, r := range up.Reported {
			ns = max(ns, r.At.UnixNano())
		}
	}
	return ns
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

// refresh rewrites e in ristretto with a new cost (an update in place: not buffered).
// If ristretto refuses, the entry is marked for another try on its next update. It runs under
// e's shard lock, so that it cannot put back an entry just pinned.
func (m *Memory) refresh(ctx context.Context, e *entry, cost int) {
	sh := m.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.mu.Lock()
	gone := e.pinned || e.evicted
	e.mu.Unlock()
	if gone {
		return
	}
	if err := m.store.Set(ctx, e.key, e, gocachestore.WithCost(int64(cost))); err != nil {
		e.mu.Lock()
		e.cost = 0 // the next operation tries again
		e.mu.Unlock()
	}
}

// String keeps fmt (gocache formats values into its errors) from reading the entry's fields
// without its lock.
func (e *entry) String() string { return "rate-limit state of key " + strconv.Quote(e.key) }

// evicted is ristretto's OnEvict: it marks the entry so no caller updates it any more, and
// reports it when it still held counts. A pinned entry is not lost (it lives in the pinned
// tier), nor are the entries compact is moving.
func (m *Memory) evicted(item *ristretto.Item[any]) {
	e, ok := item.Value.(*entry)
	if !ok || m.closed.Load() || m.rebuilding.Load() {
		return
	}
	e.mu.Lock()
	if e.pinned || e.evicted {
		e.dropped = e.pinned
		e.mu.Unlock()
		return
	}
	e.evicted = true
	m.unlink(e)
	m.shardOf(e).ix.del(e)
	live := e.live(m.clock.Now())
	e.mu.Unlock()
	if live {
		m.reportEviction(e.key)
	}
}

// reportEviction counts, logs and reports the live eviction of key's state.
func (m *Memory) reportEviction(key string) {
	total := m.evictedLive.Add(1)
	m.logEviction(key, total)
	if m.obs != nil {
		m.obs.Observe(observe.Event{Kind: observe.EvictedLive, Store: storeName, Key: key})
	}
	if m.onEvict != nil {
		m.onEvict(key)
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

// countersFor returns the counters of s's slots, creating the missing ones, and notes s as
// the strategy last used.
func (e *entry) countersFor(s *engine.Strategy) []engine.Counter {
	if s == e.base {
		if e.more != nil {
			e.more.last = nil
		}
		return e.counters[:s.Slots()]
	}
	if e.base == nil {
		e.base = s
		if s.Slots() == 1 {
			e.inline[0] = s.NewCounter(0)
			e.counters = e.inline[:1:1]
		} else {
			e.counters = s.NewCounters()
		}
		return e.counters
	}
	if e.more == nil {
		e.more = &entryMore{}
	}
	x := e.more
	x.last = s
	if x.scratchFor == s {
		return x.scratch
	}
	if x.ids == nil {
		x.ids = make([]string, len(e.counters), len(e.counters)+s.Slots())
		for j := range x.ids {
			x.ids[j] = e.base.CounterID(j)
		}
	}
	x.scratch = x.scratch[:0]
	for j := range s.Slots() {
		id := s.CounterID(j)
		var c engine.Counter
		for i, have := range x.ids {
			if have == id {
				c = e.counters[i]
				break
			}
		}
		if c == nil {
			c = s.NewCounter(j)
			x.ids = append(x.ids, id)
			e.counters = append(e.counters, c)
		}
		x.scratch = append(x.scratch, c)
	}
	x.scratchFor = s
	return x.scratch
}

// strat returns the strategy last used on e.
func (e *entry) strat() *engine.Strategy {
	if e.more != nil && e.more.last != nil {
		return e.more.last
	}
	return e.base
}

// slotsOf returns the counters of s's slots when e has them at hand (s made the first counters,
// or scratch was built for it), or nil.
func (e *entry) slotsOf(s *engine.Strategy) []engine.Counter {
	if s == nil {
		return nil
	}
	if s == e.base {
		return e.counters[:s.Slots()]
	}
	if e.more != nil && e.more.scratchFor == s {
		return e.more.scratch
	}
	return nil
}

// maintain decides whether ristretto must be told a new cost (the counters grew), and records
// it. The instant up to which the sweep keeps the entry is not kept: the sweep works it out
// from the state when it looks (keepUntil).
func (e *entry) maintain(_ *engine.Strategy, _ time.Time) (cost int, refresh bool) {
	cost = e.heapCost()
	if cost <= int(e.cost) {
		return 0, false
	}
	e.cost = int32(cost)
	return cost, true
}

// keepUntil is the instant (store's clock, ns) up to which the sweep keeps e: one slack past the
// later of the last instant anything counts (a pause included) and the latest instant the key
// has seen, so that figures that Sync reported outlive the counts a little. The caller holds
// e.mu.
func (e *entry) keepUntil() int64 {
	until := e.hw
	if exp := engine.Expiry(e.counters); !exp.IsZero() {
		until = max(until, exp.UnixNano())
	}
	if p := e.pausedUntil(); !p.IsZero() {
		until = max(until, p.UnixNano())
	}
	sl := time.Minute
	if last := e.strat(); last != nil {
		sl = slack(last)
	}
	if e.more != nil {
		sl = max(sl, e.more.synced) // figures reported under a longer window outlive the counts
	}
	return until + int64(sl)
}

// slack is how long past its last counted instant an entry is kept: at least a minute, and
// figures that Sync reported outlive the counts a little.
func slack(s *engine.Strategy) time.Duration { return max(s.Longest(), time.Minute) }

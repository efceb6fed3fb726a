// Package sqlitestore is a cache.Store in a SQLite file, through modernc.org/sqlite (pure Go, no
// cgo), for a server's limits shared by the processes of one host.
//
// The fixed window is kept in the table rate_limit_windows and counted by one upsert per
// request: INSERT … ON CONFLICT(key, window_start) DO UPDATE SET count = count + 1 RETURNING
// count. The rolling window and the token bucket are kept encoded in rate_limit_state and
// updated in one write transaction per operation (BEGIN IMMEDIATE). The database runs in WAL
// mode with a busy timeout, so several processes can share one file; every operation is atomic
// across processes. See schema.sql.
//
// Old rows are deleted by PruneExpired, which the store also calls itself on one write in
// Options.PruneEvery.
package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/internal/realclock"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/internal/storeobs"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

//go:embed schema.sql
var schema string

// Defaults of Options.
const (
	defaultBusyTimeout = 10 * time.Second
	defaultPruneEvery  = 1000
)

// Options configures Open. The zero value gives the defaults.
type Options struct {
	// Clock is where instants come from; the host's wall clock (time.Now) when nil, which
	// every process sharing the file reads alike. (A process's monotonic clock, clock.Real(),
	// is anchored at its start, so two processes' clocks could differ by any wall-clock step
	// between their starts.)
	Clock clock.Clock
	// BusyTimeout is how long an operation waits for another connection's write lock before it
	// fails with SQLITE_BUSY; 10 s when zero.
	BusyTimeout time.Duration
	// PruneEvery is how many writes pass between two calls of PruneExpired from this Store;
	// 1000 when zero, never when negative.
	PruneEvery int
	// OnError hears of failures that do not fail an operation: a sampled PruneExpired that
	// failed (the write that triggered it has succeeded), and an encoded state that did not
	// decode (see Store). nil ignores them.
	OnError func(error)
	// Observer, when set, receives a StoreError event (Store "sqlite") for each operation
	// that failed: closed store, SQLite errors (see package observe).
	Observer observe.Observer
}

// Store is a cache.Store and cache.Admitter in a SQLite file. It is safe for concurrent use,
// and by several processes on one host. Make one with Open; the zero Store is not usable.
//
// An encoded state that does not decode (a row written by hand, a damaged file) is reported to
// Options.OnError and replaced by an empty counter, which the operation then writes back: the
// key loses what the row held instead of failing every operation until an operator deletes it.
type Store struct {
	db         *sql.DB
	clock      clock.Clock
	pruneEvery uint64
	onError    func(error)
	obs        observe.Observer
	writes     atomic.Uint64
	closed     atomic.Bool
	valid      sync.Map // *engine.Strategy -> error from validate

	sharing cache.Sharing // the Transports and counter claims over this Store value (Describe)
}

var (
	_ cache.Store     = (*Store)(nil)
	_ cache.Admitter  = (*Store)(nil)
	_ cache.Describer = (*Store)(nil)
)

// Open opens (creating if needed) the SQLite database at path, sets WAL mode, the busy timeout
// and immediate write transactions, and creates the tables. path is a file name; ":memory:" is
// refused, since each connection would see its own database. Errors say which step failed.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("ratemonitor: sqlite store: want a file path, got %q", path)
	}
	if opts.Clock == nil {
		opts.Clock = realclock.Wall{}
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = defaultBusyTimeout
	}
	if opts.PruneEvery == 0 {
		opts.PruneEvery = defaultPruneEvery
	}
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: open %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("ratemonitor: sqlite store: create tables in %s: %w", path, err)
	}
	// SQLite lets one connection write at a time. With one connection per process, this
	// process's operations queue in Go instead of in SQLite's busy handler, which sleeps and
	// retries: measured on the demo service, twice the requests per second and a p99 of 19 ms
	// instead of 122 ms. Other processes still wait through the busy timeout.
	db.SetMaxOpenConns(1)
	st := &Store{db: db, clock: opts.Clock, onError: opts.OnError, obs: opts.Observer}
	if opts.PruneEvery > 0 {
		st.pruneEvery = uint64(opts.PruneEvery)
	}
	return st, nil
}

// DB returns the database the store uses, for reports and audit tables of one's own. It has one
// connection, shared with the store: do not hold a transaction or an open Rows across a call
// to the store. Writing to the store's tables through it voids the store's guarantees.
func (st *Store) DB() *sql.DB { return st.db }

// Describe implements cache.Describer. The store reads its instants from Options.Clock, in this
// process, though its state is in a file other processes share. Its Validate accepts a
// fixed-window strategy whose windows (with margin) are whole seconds, since window_start is
// written to the second, and any other strategy whose counters encode themselves
// (encoding.BinaryMarshaler and BinaryUnmarshaler), as the rolling window's and the token
// bucket's do. Each Store value has a Sharing of its own.
func (st *Store) Describe() cache.Traits {
	return cache.Traits{Clock: st.clock, Validate: st.validate, Sharing: &st.sharing}
}

// Close closes the database; later operations return cache.ErrClosed. It is safe to call more
// than once.
func (st *Store) Close() error {
	if st.closed.Swap(true) {
		return nil
	}
	return st.db.Close()
}

// validate reports whether the store can hold s (Describe says which it can).
func (st *Store) validate(s *engine.Strategy) error {
	if s == nil {
		return errors.New("ratemonitor: sqlite store: nil strategy")
	}
	if v, ok := st.valid.Load(s); ok {
		err, _ := v.(error)
		return err
	}
	err := fits(s)
	st.valid.Store(s, err)
	return err
}

// fits is validate, before its answer is kept.
func fits(s *engine.Strategy) error {
	for j := range s.Slots() {
		if fixedcount.Is(s) {
			if w := s.SlotRule(j).EffectiveWindow(); w%time.Second != 0 {
				return fmt.Errorf("ratemonitor: sqlite store: rule %s: a fixed window here must be whole seconds, got %v", s.SlotRule(j), w)
			}
			continue
		}
		c := s.NewCounter(j)
		_, m := c.(encoding.BinaryMarshaler)
		_, u := c.(encoding.BinaryUnmarshaler)
		if !m || !u {
			return fmt.Errorf("ratemonitor: sqlite store: %s counters cannot be encoded; use the fixed window, rolling window or token bucket", s.Name())
		}
	}
	return nil
}

// check is run by every operation: the store is open, the strategy fits it, the count is valid.
func (st *Store) check(s *engine.Strategy, n int) error {
	if st.closed.Load() {
		return cache.ErrClosed
	}
	if err := st.validate(s); err != nil {
		return err
	}
	return storecheck.Count(n)
}

// Record implements cache.Store.
func (st *Store) Record(ctx context.Context, s *engine.Strategy, key string, n int) (err error) {
	if err := st.check(s, n); err != nil {
		return st.closedErr(ctx, "record", key, err)
	}
	defer st.observeErr(ctx, "record", key, &err)
	defer st.wrote(ctx)
	if fixedcount.Is(s) {
		_, err := st.fixedAdd(ctx, s, key, n, st.clock.Now())
		return err
	}
	return st.inTx(ctx, s, key, func(cs []engine.Counter, now time.Time) { s.Record(cs, now, n) })
}

// Reserve implements cache.Store.
func (st *Store) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (_ engine.Result, err error) {
	if err := st.check(s, n); err != nil {
		return engine.Result{}, st.closedErr(ctx, "reserve", key, err)
	}
	if err := s.CheckBurst(n); err != nil {
		return engine.Result{}, err
	}
	defer st.observeErr(ctx, "reserve", key, &err)
	defer st.wrote(ctx)
	if fixedcount.Is(s) {
		return st.fixedReserve(ctx, s, key, n)
	}
	var res engine.Result
	err = st.inTx(ctx, s, key, func(cs []engine.Counter, now time.Time) { res, _ = s.Reserve(cs, nil, now, n) })
	return res, err
}

// Admit implements cache.Admitter. Under the fixed window it is the single upsert the package
// comment gives, so the (limit+1)-th attempt is counted and refused.
func (st *Store) Admit(ctx context.Context, s *engine.Strategy, key string, n int) (_ strategy.Decision, err error) {
	if err := st.check(s, n); err != nil {
		return strategy.Decision{}, st.closedErr(ctx, "admit", key, err)
	}
	if err := s.CheckBurst(n); err != nil {
		return strategy.Decision{}, err
	}
	defer st.observeErr(ctx, "admit", key, &err)
	defer st.wrote(ctx)
	if fixedcount.Is(s) {
		return st.fixedAdmit(ctx, s, key, n)
	}
	var d strategy.Decision
	err = st.inTx(ctx, s, key, func(cs []engine.Counter, now time.Time) { d, _ = s.Admit(cs, now, n) })
	return d, err
}

// Release implements cache.Store.
func (st *Store) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) (err error) {
	if err := st.check(s, n); err != nil {
		return st.closedErr(ctx, "release", key, err)
	}
	defer st.observeErr(ctx, "release", key, &err)
	if fixedcount.Is(s) {
		return st.fixedRelease(ctx, s, key, at, n)
	}
	return st.inTx(ctx, s, key, func(cs []engine.Counter, _ time.Time) { s.Release(cs, at, n) })
}

// Peek implements cache.Store. It reads without taking the write lock, except for a key whose
// clock was stepped back (see engine.Rebase), whose rebased state it writes once.
func (st *Store) Peek(ctx context.Context, s *engine.Strategy, key string, n int) (_ strategy.Snapshot, err error) {
	if err := st.check(s, 1); err != nil {
		return strategy.Snapshot{}, st.closedErr(ctx, "peek", key, err)
	}
	if n != 0 {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Snapshot{}, err
		}
	}
	defer st.observeErr(ctx, "peek", key, &err)
	now := st.clock.Now()
	var cs []engine.Counter
	var rebase bool
	if fixedcount.Is(s) {
		cs, _, rebase, err = fixedLoad(ctx, st.db, s, key, now)
	} else {
		if cs, err = st.load(ctx, st.db, s, key); err == nil {
			rebase = engine.Rebase(cs, nil, now) != 0
		}
	}
	if err != nil || !rebase {
		if err != nil {
			return strategy.Snapshot{}, err
		}
		return s.Peek(cs, nil, now, n)
	}
	return st.peekRebased(ctx, s, key, n)
}

// peekRebased is Peek for a key whose clock was stepped back: the rebase is anchored at the
// instant it is made, so it is written (in a write transaction) rather than redone at every
// read, and the wait this Peek tells is the one the operations after it find.
func (st *Store) peekRebased(ctx context.Context, s *engine.Strategy, key string, n int) (snap strategy.Snapshot, err error) {
	var perr error
	if fixedcount.Is(s) {
		err = st.tx(ctx, func(tx *sql.Tx) error {
			now := st.clock.Now()
			if err := fixedRebase(ctx, tx, s, key, now); err != nil {
				return err
			}
			cs, _, _, err := fixedLoad(ctx, tx, s, key, now)
			if err == nil {
				snap, perr = s.Peek(cs, nil, now, n)
			}
			return err
		})
	} else {
		err = st.inTx(ctx, s, key, func(cs []engine.Counter, now time.Time) { snap, perr = s.Peek(cs, nil, now, n) })
	}
	if err != nil {
		return strategy.Snapshot{}, err
	}
	return snap, perr
}

// closedErr reports err to the observer when it is cache.ErrClosed (the other errors of check
// are the caller's), and returns it.
func (st *Store) closedErr(ctx context.Context, op, key string, err error) error {
	if errors.Is(err, cache.ErrClosed) {
		st.observeErr(ctx, op, key, &err)
	}
	return err
}

// observeErr reports *err, if any, to the observer, if any.
func (st *Store) observeErr(ctx context.Context, op, key string, err *error) {
	if st.obs != nil && *err != nil {
		storeobs.Failed(ctx, st.obs, "sqlite", op, key, *err)
	}
}

// wrote counts a write and runs PruneExpired on one in PruneEvery.
func (st *Store) wrote(ctx context.Context) {
	if st.pruneEvery == 0 || st.writes.Add(1)%st.pruneEvery != 0 {
		return
	}
	// The prune is the store's chore, not the caller's: a caller that gives up must not
	// cut it short.
	if _, _, err := st.pruneOnce(context.WithoutCancel(ctx)); err != nil {
		st.report(err)
	}
}

func (st *Store) report(err error) {
	if st.onError != nil {
		st.onError(err)
	}
}

// pruneBatch is the most rows one prune statement deletes, so that the store's connection is
// never held long: other operations run between batches.
const pruneBatch = 5000

// PruneExpired deletes the fixed windows that started two window lengths or more before now
// (they ended at least one window ago) and the encoded states in which nothing counts any
// more, in batches of 5 000 rows. It returns how many rows it deleted. Both searches use an
// index, so a prune with nothing to delete costs little whatever the table's size.
func (st *Store) PruneExpired(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, more, err := st.pruneOnce(ctx)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// pruneOnce deletes up to pruneBatch rows of each table, and reports whether there may be more.
func (st *Store) pruneOnce(ctx context.Context) (deleted int64, more bool, err error) {
	if st.closed.Load() {
		return 0, false, cache.ErrClosed
	}
	now := st.clock.Now()
	r1, err := st.db.ExecContext(ctx, `DELETE FROM rate_limit_windows WHERE rowid IN (
		SELECT rowid FROM rate_limit_windows WHERE unixepoch(window_start) + 2 * CAST(key AS INTEGER) <= ? LIMIT ?)`,
		now.Unix(), pruneBatch)
	if err != nil {
		return 0, false, fmt.Errorf("ratemonitor: sqlite store: prune windows: %w", err)
	}
	r2, err := st.db.ExecContext(ctx, `DELETE FROM rate_limit_state WHERE rowid IN (
		SELECT rowid FROM rate_limit_state WHERE expires_at <= ? LIMIT ?)`, now.UnixNano(), pruneBatch)
	if err != nil {
		return 0, false, fmt.Errorf("ratemonitor: sqlite store: prune states: %w", err)
	}
	n1, _ := r1.RowsAffected()
	n2, _ := r2.RowsAffected()
	return n1 + n2, n1 == pruneBatch || n2 == pruneBatch, nil
}

// Package dynamostore is a cache.Store and cache.Admitter in an Amazon DynamoDB table, through
// github.com/aws/aws-sdk-go-v2/service/dynamodb, for limits shared by any number of processes
// and hosts.
//
// # Item layout
//
// One item per key, partition key pk = "rate_limiter#" + key (a string; the table has no sort
// key), or "rate_limiter#h#" + hex(SHA-256(key)) when key is not valid UTF-8 (DynamoDB
// strings are UTF-8), when "rate_limiter#" + key would be longer than DynamoDB's 2048 bytes,
// or when key starts with "h#". Every write sets:
//
//	version  N  bumped by one on every write: the optimistic lock
//	ttl      N  Unix seconds: now + Options.IdleTimeout, and never before the end of what
//	            counts, nor before the ttl already stored (another strategy's counters on
//	            the key may count longer); enable DynamoDB TTL on "ttl" with EnableTTL to
//	            have idle keys deleted
//
// and, per counter of the strategy (engine.Strategy.CounterID: rules that share a counter
// share the attributes, and all of a key's counters are in one item, so one conditional write
// covers every rule atomically):
//
//   - token bucket: a map attribute named by the counter ID (e.g. "tb:60:60000000000") with
//     debt (missing tokens × window in ns, the token bucket's exact state),
//     last_refill_time (Unix ns), and for people reading the table tokens (capacity −
//     debt/window, to 9 decimals), capacity, refill_rate (tokens per second, to 9 decimals)
//     and window_ns. Only debt and last_refill_time are read back.
//   - fixed window: top-level numbers "<id>#start" (window start, Unix ns), "<id>#count"
//     and "<id>#latest" (the latest instant seen, Unix ns), top-level so that ADD can
//     increment them.
//   - any other counter that encodes itself (the rolling window): a binary attribute named
//     by the counter ID holding its MarshalBinary: up to (Window+Margin)/Granularity+1
//     buckets of up to 30 bytes (about 15–21 in practice). DynamoDB refuses items over
//     400 KB, so a strategy whose worst case exceeds 350 KB is refused:
//     raise the rule's Granularity (a day asked for at 1 s is 86 401 buckets; at 10 s,
//     8 641 fit; the default for a day, 24 min, is 61).
//
// All numbers are int64 values written as DynamoDB Numbers (38 digits), so they are exact.
//
// # Writes
//
// An operation reads the item (strongly consistent GetItem), applies the strategy's own
// arithmetic to it at the store clock's instant, and writes the result with one UpdateItem
// whose ConditionExpression requires the version it read (attribute_not_exists(pk) for a new
// item) and, for a token-bucket consume, that every bucket still holds the tokens the consume
// spends. When the condition fails (another writer came first), it waits a random jitter and
// starts again from the read, at most Options.MaxRetries times; then it returns an error
// wrapping ErrContended, having changed nothing. A refusal and a Peek write nothing. An
// existing item without a valid version is damage, not contention: the error says to delete
// the item to reset the key.
//
// The store never lets the SDK replay a write: every UpdateItem is made with one attempt
// (RetryMaxAttempts 1 for that call, whatever the client's retryer), because a write whose
// answer was lost may have been applied, and sent again it could count twice. Such an
// unclear outcome is returned as an error; reads keep the client's retries.
//
// The fixed window's Admit and Record are one UpdateItem without a read: ADD n to every
// counter under the condition that each counter's window is the current one and its latest
// instant is not after now (and, to never lower the ttl, a second ADD that leaves ttl alone
// when the stored one is later); when that fails (a new window, a new key, a clock behind the
// key's), the operation makes one versioned read and write as above, and when that write
// loses to another writer (typically one starting the same new window) it tries the ADD
// again, within the same retries.
package dynamostore

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/bucket"
	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/internal/realclock"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/internal/storeobs"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// keyPrefix is put before a key to make its item's partition key.
const keyPrefix = "rate_limiter#"

// Defaults of Options.
const (
	defaultMaxRetries   = 3
	defaultIdleTimeout  = time.Hour
	defaultRetryBackoff = 2 * time.Millisecond
	maxBackoff          = 100 * time.Millisecond
)

// maxItemBytes is the largest worst-case item the store accepts for a strategy: DynamoDB's
// 400 KB item limit less room for the attribute names and other strategies' counters on the
// same key.
const maxItemBytes = 350 * 1024

// Worst-case sizes for validate: a rolling-window bucket is three varints (index, latest
// instant, count) of up to 10 bytes each; a slot's attributes other than its buckets and the
// item's own (pk, version, ttl) are well under these.
const (
	bucketBytes  = 3 * 10
	slotOverhead = 256
	itemOverhead = 3 * 1024
)

// ErrContended is wrapped when an operation's conditional write failed on every attempt
// (1 + Options.MaxRetries) because other writers kept changing the key's item. Nothing was
// recorded: the request was neither admitted nor refused. It wraps cache.ErrContended, which
// the Transport and the middleware retry within the request's context (never a store
// failure under their StoreErrorPolicy); other callers may retry too.
var ErrContended = fmt.Errorf("%w: dynamodb store: gave up after the retries", cache.ErrContended)

// Options configures New. Table is required; the rest have defaults.
type Options struct {
	// Table is the table's name. It must exist with partition key pk of type string (see
	// CreateTable).
	Table string
	// IdleTimeout is how long after its last write a key's item may be deleted by DynamoDB's
	// TTL, if nothing in it counts any more then: every write sets ttl = max(now +
	// IdleTimeout, the instant nothing counts), in Unix seconds rounded up; 1 h when zero.
	IdleTimeout time.Duration
	// MaxRetries is how many times an operation whose conditional write failed is tried
	// again before it returns ErrContended: 3 when zero, none when negative.
	MaxRetries int
	// RetryBackoff scales the jitter before a retry: retry k (from 1) first sleeps a random
	// duration in [0, RetryBackoff·2^(k−1)), at most 100 ms, on the wall clock (not Clock);
	// 2 ms when zero.
	RetryBackoff time.Duration
	// Clock is where instants come from; the host's wall clock when nil. Every process sharing the
	// table should read the same wall time: within engine.StepTolerance (1 s), beyond which
	// a clock behind a key's latest instant is taken for a step back and the key is rebased
	// on it (see engine.Rebase). Tests pass a clock they can step.
	Clock clock.Clock
	// Observer, when set, receives a Retry event (Store "dynamodb") for each retry after a
	// conditional-check failure, and a StoreError event for each operation that failed:
	// closed store, ErrContended, DynamoDB errors (see package observe).
	Observer observe.Observer
}

// Stats counts the store's decisions and the contention it met. Counts are since New.
type Stats struct {
	// Accepted is the number of Reserve and Admit calls that admitted their burst.
	Accepted int64
	// Rejected is the number of Reserve and Admit calls that refused it.
	Rejected int64
	// ConditionalCheckFailures is the number of versioned writes DynamoDB refused because
	// the item had changed since it was read.
	ConditionalCheckFailures int64
	// Retries is the number of times an operation started again after such a failure.
	Retries int64
	// Contended is the number of operations that returned ErrContended.
	Contended int64
	// FastPathMisses is the number of fixed-window ADDs whose condition failed (a new window
	// or key) and that fell back to a versioned write.
	FastPathMisses int64
}

// Store is a cache.Store and cache.Admitter in a DynamoDB table. It is safe for concurrent use
// and by many processes. Make one with New; the zero Store is not usable.
type Store struct {
	client     *dynamodb.Client
	table      string
	idle       time.Duration
	maxRetries int
	backoff    time.Duration
	clock      clock.Clock
	closed     atomic.Bool
	valid      sync.Map // *engine.Strategy -> error

	accepted, rejected, ccf, retries, contended, misses atomic.Int64
	obs                                                 observe.Observer

	// beforeWrite, when set (tests), runs between the read and the conditional write of a
	// versioned update, with the attempt number from 0.
	beforeWrite func(attempt int)

	sharing cache.Sharing // the Transports and counter claims over this Store value (Describe)
}

var (
	_ cache.Store     = (*Store)(nil)
	_ cache.Admitter  = (*Store)(nil)
	_ cache.Describer = (*Store)(nil)
)

// New returns a store on client's table opts.Table. It makes no request: an unreachable
// endpoint or a missing table is reported by the first operation (or call Check). client is
// built by the caller (region, credentials, endpoint); the store never closes it.
func New(client *dynamodb.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("ratemonitor: dynamodb store: nil client")
	}
	if opts.Table == "" {
		return nil, errors.New("ratemonitor: dynamodb store: Options.Table is empty; name the table (see CreateTable)")
	}
	if opts.IdleTimeout < 0 {
		return nil, fmt.Errorf("ratemonitor: dynamodb store: negative IdleTimeout %v", opts.IdleTimeout)
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	switch {
	case opts.MaxRetries == 0:
		opts.MaxRetries = defaultMaxRetries
	case opts.MaxRetries < 0:
		opts.MaxRetries = 0
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = defaultRetryBackoff
	}
	if opts.Clock == nil {
		opts.Clock = realclock.Wall{}
	}
	return &Store{client: client, table: opts.Table, idle: opts.IdleTimeout, maxRetries: opts.MaxRetries,
		backoff: opts.RetryBackoff, clock: opts.Clock, obs: opts.Observer}, nil
}

// Describe implements cache.Describer. The store contends, since every write is a conditional
// one that fails when another writer changed the key's item first. Its Validate accepts a
// strategy whose counters are token buckets, fixed windows or encode themselves
// (encoding.BinaryMarshaler and BinaryUnmarshaler, as the rolling window's do), and whose state
// fits in one DynamoDB item whatever the traffic: the encoded counters of a rolling window hold
// up to (Window+Margin)/Granularity+1 buckets, and a strategy whose worst case exceeds
// 350 KB is refused with an error that says to raise the granularity (an item past
// DynamoDB's 400 KB could no longer be written, and its key would be stuck). Each Store value
// has a Sharing of its own.
func (st *Store) Describe() cache.Traits {
	return cache.Traits{Contends: true, Validate: st.validate, Sharing: &st.sharing}
}

// Stats returns the counts so far. It is safe for concurrent use.
func (st *Store) Stats() Stats {
	return Stats{
		Accepted: st.accepted.Load(), Rejected: st.rejected.Load(),
		ConditionalCheckFailures: st.ccf.Load(), Retries: st.retries.Load(),
		Contended: st.contended.Load(), FastPathMisses: st.misses.Load(),
	}
}

// Close marks the store closed; later operations return cache.ErrClosed. It does not close the
// client, which the caller owns. It is safe to call more than once.
func (st *Store) Close() error {
	st.closed.Store(true)
	return nil
}

// validate reports whether the store can hold s (Describe says which it can): a rolling
// window's bucket takes up to bucketBytes.
func (st *Store) validate(s *engine.Strategy) error {
	if s == nil {
		return errors.New("ratemonitor: dynamodb store: nil strategy")
	}
	if v, ok := st.valid.Load(s); ok {
		err, _ := v.(error)
		return err
	}
	var err error
	size := int64(itemOverhead)
	for j := range s.Slots() {
		size += slotOverhead + int64(len(s.CounterID(j)))
		if _, _, ok := s.SmoothSlot(j); ok {
			continue // a GCRA (engine.Strategy.Smoothed): two varints, within the slot's overhead
		}
		switch c := s.NewCounter(j).(type) {
		case *bucket.Bucket, *fixedcount.Counter:
		default:
			_, m := c.(encoding.BinaryMarshaler)
			_, u := c.(encoding.BinaryUnmarshaler)
			if !m || !u {
				err = fmt.Errorf("ratemonitor: dynamodb store: %s counters cannot be stored; use the token bucket, fixed window or rolling window", s.Name())
			}
			r := s.SlotRule(j)
			size += (int64(r.EffectiveWindow()/r.Bucket()) + 1) * bucketBytes
		}
	}
	if err == nil && size > maxItemBytes {
		err = fmt.Errorf("ratemonitor: dynamodb store: %s %v: its state can take up to %d KB in one item, over the %d KB this store allows (DynamoDB refuses items over 400 KB): raise the rules' Granularity so that (Window+Margin)/Granularity, summed over the rules, is at most about %d",
			s.Name(), s.Rules(), (size+1023)/1024, maxItemBytes/1024, (maxItemBytes-itemOverhead)/bucketBytes)
	}
	st.valid.Store(s, err)
	return err
}

func (st *Store) check(s *engine.Strategy, n int) error {
	if st.closed.Load() {
		return cache.ErrClosed
	}
	if err := st.validate(s); err != nil {
		return err
	}
	return storecheck.Count(n)
}

// storeName is the DynamoDB store's name in observer events.
const storeName = "dynamodb"

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
		storeobs.Failed(ctx, st.obs, storeName, op, key, *err)
	}
}

func (st *Store) count(allowed bool) {
	if allowed {
		st.accepted.Add(1)
	} else {
		st.rejected.Add(1)
	}
}

// Record implements cache.Store. Errors: cache.ErrClosed, cache.ErrInvalidCount, ErrContended,
// and DynamoDB's, wrapped with what to do.
func (st *Store) Record(ctx context.Context, s *engine.Strategy, key string, n int) (err error) {
	if err := st.check(s, n); err != nil {
		return st.closedErr(ctx, "record", key, err)
	}
	defer st.observeErr(ctx, "record", key, &err)
	if fixedcount.Is(s) {
		_, err := st.fixedAdd(ctx, s, key, n, false)
		return err
	}
	return st.update(ctx, "record", s, key, func(cs []engine.Counter, now time.Time) (bool, int) {
		s.Record(cs, now, n)
		return true, 0
	})
}

// Reserve implements cache.Store. Errors: Record's, and engine.Strategy.CheckBurst's.
func (st *Store) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (_ engine.Result, err error) {
	if err := st.check(s, n); err != nil {
		return engine.Result{}, st.closedErr(ctx, "reserve", key, err)
	}
	if err := s.CheckBurst(n); err != nil {
		return engine.Result{}, err
	}
	defer st.observeErr(ctx, "reserve", key, &err)
	var res engine.Result
	err = st.update(ctx, "reserve", s, key, func(cs []engine.Counter, now time.Time) (bool, int) {
		res, _ = s.Reserve(cs, nil, now, n)
		return res.Allowed, n
	})
	if err != nil {
		return engine.Result{}, err
	}
	st.count(res.Allowed)
	return res, nil
}

// Admit implements cache.Admitter: see engine.Strategy.Admit. Under the fixed window a
// refused attempt is counted too, by the ADD the package comment gives. Errors: Reserve's.
func (st *Store) Admit(ctx context.Context, s *engine.Strategy, key string, n int) (_ strategy.Decision, err error) {
	if err := st.check(s, n); err != nil {
		return strategy.Decision{}, st.closedErr(ctx, "admit", key, err)
	}
	if err := s.CheckBurst(n); err != nil {
		return strategy.Decision{}, err
	}
	defer st.observeErr(ctx, "admit", key, &err)
	var d strategy.Decision
	if fixedcount.Is(s) {
		d, err = st.fixedAdd(ctx, s, key, n, true)
	} else {
		err = st.update(ctx, "admit", s, key, func(cs []engine.Counter, now time.Time) (bool, int) {
			d, _ = s.Admit(cs, now, n)
			return d.Allowed, n
		})
	}
	if err != nil {
		return strategy.Decision{}, err
	}
	st.count(d.Allowed)
	return d, nil
}

// Release implements cache.Store. Errors: Record's.
func (st *Store) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) (err error) {
	if err := st.check(s, n); err != nil {
		return st.closedErr(ctx, "release", key, err)
	}
	defer st.observeErr(ctx, "release", key, &err)
	return st.update(ctx, "release", s, key, func(cs []engine.Counter, _ time.Time) (bool, int) {
		s.Release(cs, at, n)
		return true, 0
	})
}

// Peek implements cache.Store with one strongly consistent read; it writes nothing, except for
// a key whose clock was stepped back (see engine.Rebase), whose rebased state it writes once
// with the versioned update (so its errors include ErrContended then). Errors: cache.ErrClosed,
// engine.Strategy.CheckBurst's for n ≠ 0, and DynamoDB's.
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
	it, err := st.get(ctx, key)
	if err != nil {
		return strategy.Snapshot{}, err
	}
	cs, err := decode(s, it)
	if err != nil {
		return strategy.Snapshot{}, fmt.Errorf("ratemonitor: dynamodb store: key %q: %w", key, err)
	}
	now := st.clock.Now()
	if engine.Rebase(cs, nil, now) == 0 {
		return s.Peek(cs, nil, now, n)
	}
	// The clock was stepped back: write the rebased state (see updateOnce), so that the wait
	// told here is the one a Reserve after it finds.
	var snap strategy.Snapshot
	var perr error
	if err := st.update(ctx, "peek", s, key, func(cs []engine.Counter, now time.Time) (bool, int) {
		snap, perr = s.Peek(cs, nil, now, n)
		return false, 0
	}); err != nil {
		return strategy.Snapshot{}, err
	}
	return snap, perr
}

// update runs the versioned read-modify-write: op applies the operation to the counters read
// at now and reports whether to write, and how many tokens the write spends (consume > 0
// adds the enough-tokens condition for token buckets).
func (st *Store) update(ctx context.Context, opName string, s *engine.Strategy, key string, op func([]engine.Counter, time.Time) (write bool, consume int)) error {
	for attempt := 0; ; attempt++ {
		done, err := st.updateOnce(ctx, s, key, attempt, op)
		if done || err != nil {
			return err
		}
		if err := st.contention(ctx, opName, key, attempt); err != nil {
			return err
		}
	}
}

// updateOnce is one attempt of update: done is false when the conditional write failed
// because the item changed since it was read (nothing was written).
func (st *Store) updateOnce(ctx context.Context, s *engine.Strategy, key string, attempt int, op func([]engine.Counter, time.Time) (write bool, consume int)) (done bool, err error) {
	it, err := st.get(ctx, key)
	if err != nil {
		return false, err
	}
	cs, err := decode(s, it)
	if err != nil {
		return false, fmt.Errorf("ratemonitor: dynamodb store: key %q: %w", key, err)
	}
	version, exists, err := itemVersion(it)
	if err != nil {
		return false, fmt.Errorf("ratemonitor: dynamodb store: key %q: %w", key, err)
	}
	oldTTL, _ := getNum(it, attrTTL)
	pre := snapshotBuckets(cs)
	now := st.clock.Now()
	// A clock stepped back: the shift is written even when op writes nothing (a refusal, a
	// Peek), since it is anchored at this instant and redone later it would move the key again.
	shifted := engine.Rebase(cs, nil, now) != 0
	write, consume := op(cs, now)
	if !write {
		if !shifted {
			return true, nil
		}
		consume = 0 // nothing spent: only the rebased state is written
	}
	if st.beforeWrite != nil {
		st.beforeWrite(attempt)
	}
	in := st.versionedUpdate(s, key, cs, pre, now, version, exists, consume, oldTTL)
	_, err = st.client.UpdateItem(ctx, in, noReplay)
	if err == nil {
		return true, nil
	}
	if !isConditionFailed(err) {
		return false, st.wrap("write", key, err)
	}
	return false, nil
}

// contention counts a failed conditional write at attempt (from 0) and either returns
// ErrContended, when the retries are spent, or waits the jitter before the next attempt.
func (st *Store) contention(ctx context.Context, opName, key string, attempt int) error {
	st.ccf.Add(1)
	if attempt >= st.maxRetries {
		st.contended.Add(1)
		return fmt.Errorf("%w (%d attempts on key %q)", ErrContended, attempt+1, key)
	}
	st.retries.Add(1)
	if st.obs != nil {
		st.obs.Observe(observe.Event{Kind: observe.Retry, Store: storeName, Op: opName, Key: key, N: attempt + 1})
	}
	return st.jitter(ctx, attempt)
}

// jitter sleeps a random duration in [0, backoff·2^attempt), at most maxBackoff, on the wall
// clock, or returns the context's error.
func (st *Store) jitter(ctx context.Context, attempt int) error {
	// Capped before the shift, which would overflow for a large RetryBackoff.
	ceil := maxBackoff
	if attempt < 20 && st.backoff <= maxBackoff>>attempt {
		ceil = st.backoff << attempt
	}
	d := rand.N(ceil)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Package redisstore is a cache.Store in Redis (6.2 or later, for ZADD GT), so that many processes share one allocation per
// key (a Xero tenant's 60 per minute is shared by every worker that calls Xero for it).
//
// Every operation is one round trip for all rules of a key: a Lua script, loaded once and run
// with EVALSHA (on NOSCRIPT, after a restart, failover or SCRIPT FLUSH, it is loaded and run
// once more). The script reads Redis TIME, so no client's clock decides. Keys of one logical key
// share a {hash tag} (Redis Cluster works), user keys are encoded so that none can reach
// another's, and every key the script writes gets a TTL of its window plus a small slack in the
// same script.
package redisstore

import (
	"context"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

//go:embed rollingwindow.lua
var scriptSource string

var script = redis.NewScript(scriptSource)

// MaxBuckets bounds W/G for a rule kept in Redis: the script walks the oldest buckets of a key
// to answer a wait, and Redis serves nobody else meanwhile. A day window at 1 s granularity
// (86 400 buckets) is refused, by Validate (so by ratemonitor.New) and by every operation; at
// 10 s or 1 min it is fine.
const MaxBuckets = 10_000

// Defaults of Options.
const (
	DefaultPrefix  = "ratemonitor"
	DefaultTimeout = 100 * time.Millisecond
	DefaultSlack   = time.Second
)

// Options configures New. The zero value gives the defaults.
type Options struct {
	// Prefix starts every Redis key (default "ratemonitor"). It must not contain '{' or '}'.
	Prefix string
	// Timeout bounds each operation, round trip included (default 100 ms). When it passes, the
	// operation fails with an error wrapping context.DeadlineExceeded, and it is never retried:
	// the script may already have counted.
	Timeout time.Duration
	// Slack is how long a key outlives its window (default 1 s): every key's TTL is at least
	// its window and at most window + Slack past the latest request it holds.
	Slack time.Duration
	// Clock, for tests only, replaces Redis TIME as the source of instants. Leave it nil in
	// production so that every process sharing the store shares Redis's clock.
	Clock clock.Clock
}

// Store is a cache.Store in Redis. It is safe for concurrent use; Close does not close the
// client, which is the caller's.
type Store struct {
	client  redis.UniversalClient
	opts    Options
	closed  atomic.Bool
	static  sync.Map // *strategy.Strategy → []any, the script arguments fixed by the strategy
	statics atomic.Int64
}

var (
	_ cache.Store  = (*Store)(nil)
	_ cache.Syncer = (*Store)(nil)
)

// New returns a store over client, which may be a single-node, Sentinel (failover) or Cluster
// client. Two client settings are required, and New refuses a *redis.Client or
// *redis.ClusterClient without them: MaxRetries: -1 (go-redis retries a command whose reply was
// lost, which would replay a script that may have counted) and ContextTimeoutEnabled: true (so
// that Options.Timeout bounds each operation). New also refuses invalid options.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil || reflect.ValueOf(client).Kind() == reflect.Pointer && reflect.ValueOf(client).IsNil() {
		return nil, errors.New("ratemonitor: redis store: nil client")
	}
	retries, ctxTimeouts := 0, true
	switch c := client.(type) {
	case *redis.Client:
		retries, ctxTimeouts = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		retries, ctxTimeouts = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
	}
	if retries > 0 {
		return nil, fmt.Errorf("ratemonitor: redis store: the client retries commands (MaxRetries %d); set MaxRetries: -1 so that a script that may have run is never replayed", retries)
	}
	if !ctxTimeouts {
		return nil, errors.New("ratemonitor: redis store: the client ignores context deadlines; set ContextTimeoutEnabled: true so that Options.Timeout bounds each operation")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("ratemonitor: redis store: prefix %q contains a brace, which would break the hash tag", opts.Prefix)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Slack == 0 {
		opts.Slack = DefaultSlack
	}
	if opts.Timeout < 0 || opts.Slack < 0 {
		return nil, fmt.Errorf("ratemonitor: redis store: Timeout %v and Slack %v must not be negative", opts.Timeout, opts.Slack)
	}
	return &Store{client: client, opts: opts}, nil
}

// Keys returns the Redis keys that hold key's state under s: a sorted set and a hash per
// counter, then the key's pause (a string, present only while a pause lasts), all with the
// same hash tag. For inspection and tests.
func (st *Store) Keys(s *strategy.Strategy, key string) []string {
	tag := st.opts.Prefix + ":{k" + base64.RawURLEncoding.EncodeToString([]byte(key)) + "}:"
	keys := make([]string, 0, 2*s.Slots()+1)
	for j := range s.Slots() {
		base := tag + s.CounterID(j)
		keys = append(keys, base+":z", base+":h")
	}
	return append(keys, tag+"pause")
}

// run executes op for key under s and returns the script's reply.
func (st *Store) run(ctx context.Context, s *strategy.Strategy, key, op string, n int64, at time.Time, extra ...any) ([]int64, error) {
	if st.closed.Load() {
		return nil, cache.ErrClosed
	}
	static, err := st.staticArgs(s)
	if err != nil {
		return nil, err
	}
	now := ""
	if st.opts.Clock != nil {
		now = strconv.FormatInt(st.opts.Clock.Now().UnixMicro(), 10)
	}
	args := make([]any, 0, 4+len(static)+len(extra))
	args = append(args, op, n, now, at.UnixMicro())
	args = append(args, static...)
	args = append(args, extra...)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, st.opts.Timeout)
	defer cancel()
	start := time.Now()
	res, err := script.Run(ctx, st.client, st.Keys(s, key), args...).Int64Slice()
	if err != nil {
		return nil, st.explain(parent, op, key, time.Since(start), err)
	}
	return res, nil
}

// Admit implements cache.Admitter for the rolling window: a Reserve (atomic, one round trip)
// followed by a Peek (a second round trip) for the rules' state. The decision is exact; the
// Used and Remaining figures are read just after it, so another process's requests in between
// may show in them. Reset is the rule's effective window when anything counts: an upper bound,
// since the script does not return the time until the window empties.
func (st *Store) Admit(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Decision, error) {
	res, err := st.Reserve(ctx, s, key, n)
	if err != nil {
		return strategy.Decision{}, err
	}
	snap, err := st.Peek(ctx, s, key, 0)
	if err != nil {
		return strategy.Decision{}, err
	}
	d := strategy.Decision{Allowed: res.Allowed, RetryAfter: res.Wait, At: res.At, Rules: make([]strategy.RuleState, len(snap.Usage))}
	for i, u := range snap.Usage {
		d.Rules[i] = strategy.RuleState{Rule: u.Rule, Used: u.Used, Remaining: u.Remaining}
		if u.Used > 0 {
			d.Rules[i].Reset = u.Rule.EffectiveWindow()
		}
	}
	return d, nil
}

// Validate reports whether the store can hold s: a rolling-window strategy whose rules have
// whole-microsecond windows and granularities, at most MaxBuckets buckets and limits up to
// cache.MaxCount. ratemonitor.New calls it (cache.Validator); every operation checks it too.
func (st *Store) Validate(s *strategy.Strategy) error {
	_, err := st.staticArgs(s)
	return err
}

// staticArgs returns the script arguments that depend only on the strategy (slots and rules),
// built once per strategy.
func (st *Store) staticArgs(s *strategy.Strategy) ([]any, error) {
	if s == nil {
		return nil, errors.New("ratemonitor: redis store: nil strategy")
	}
	if v, ok := st.static.Load(s); ok {
		return v.([]any), nil
	}
	if s.Name() != (rollingwindow.Algorithm{}).Name() {
		return nil, fmt.Errorf("ratemonitor: redis store: no script for strategy %q", s.Name())
	}
	if st.statics.Add(1) > 1024 {
		// Strategies are meant to live as long as their Transports; if callers make them per
		// request, start the cache afresh rather than grow it without bound.
		st.static.Clear()
		st.statics.Store(1)
	}
	args := []any{s.Slots()}
	for j := range s.Slots() {
		r := s.SlotRule(j)
		w, g := r.EffectiveWindow(), r.Bucket()
		if w%time.Microsecond != 0 || g%time.Microsecond != 0 {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s: window and granularity must be whole microseconds", r)
		}
		if b := w / g; b > MaxBuckets {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s keeps up to %d buckets per key; the script may walk them all while Redis waits: "+
				"set its Granularity to at least %v (%d buckets at most)", r, b+1, (w+MaxBuckets-1)/MaxBuckets, MaxBuckets)
		}
		args = append(args, w.Microseconds(), g.Microseconds(), st.opts.Slack.Microseconds())
	}
	rules := s.Rules()
	args = append(args, len(rules))
	for i, r := range rules {
		if r.EffectiveLimit() > cache.MaxCount {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s: limit above %d", r, cache.MaxCount)
		}
		args = append(args, s.SlotOf(i)+1, r.EffectiveLimit())
	}
	st.static.Store(s, args)
	return args, nil
}

// explain wraps a failed call's error with what happened: the caller's own cancellation or
// deadline, the store's timeout, or the client's.
func (st *Store) explain(parent context.Context, op, key string, took time.Duration, err error) error {
	var ne net.Error
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	switch {
	case parent.Err() != nil:
		if !errors.Is(err, parent.Err()) {
			err = fmt.Errorf("%w: %w", parent.Err(), err)
		}
	case timedOut && took >= st.opts.Timeout:
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		err = fmt.Errorf("no answer within the store's timeout of %v: %w", st.opts.Timeout, err)
	case timedOut:
		err = fmt.Errorf("the client timed out after %v (its ReadTimeout or WriteTimeout): %w", took.Round(time.Millisecond), err)
	}
	return fmt.Errorf("ratemonitor: redis store%s: %s on key %q: %w", st.where(), op, key, err)
}

// where names the server of a single-node client, for error messages.
func (st *Store) where() string {
	if c, ok := st.client.(*redis.Client); ok {
		return " at " + c.Options().Addr
	}
	return ""
}

// Record implements cache.Store: one round trip. Errors: cache.ErrInvalidCount for n outside
// 1..cache.MaxCount; Validate's; cache.ErrClosed after Close; and the call's own failure, which
// wraps context.DeadlineExceeded when the store's Timeout passed, the caller's context error
// when that ended first, and otherwise the client's error (connection refused, say).
func (st *Store) Record(ctx context.Context, s *strategy.Strategy, key string, n int) error {
	if err := cache.CheckCount(n); err != nil {
		return err
	}
	_, err := st.run(ctx, s, key, "record", int64(n), time.Time{})
	return err
}

// Reserve implements cache.Store: one round trip. Result.At is Redis's instant (µs
// resolution) and Result.Wait is in µs steps. Errors are Record's, and strategy.CheckBurst's
// for the burst. A Reserve cut off by a timeout may still have recorded: its slots are then held
// until they expire.
func (st *Store) Reserve(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Result, error) {
	if s != nil {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Result{}, err
		}
	}
	if err := cache.CheckCount(n); err != nil {
		return strategy.Result{}, err
	}
	r, err := st.run(ctx, s, key, "reserve", int64(n), time.Time{})
	if err != nil {
		return strategy.Result{}, err
	}
	if len(r) != 3 {
		return strategy.Result{}, fmt.Errorf("ratemonitor: redis store: reserve: unexpected reply %v", r)
	}
	return strategy.Result{Allowed: r[0] == 1, Wait: time.Duration(r[1]) * time.Microsecond, At: time.UnixMicro(r[2])}, nil
}

// Release implements cache.Store: one round trip. Errors are Record's.
func (st *Store) Release(ctx context.Context, s *strategy.Strategy, key string, at time.Time, n int) error {
	if err := cache.CheckCount(n); err != nil {
		return err
	}
	_, err := st.run(ctx, s, key, "release", int64(n), at)
	return err
}

// Peek implements cache.Store: one round trip, which writes only to move the key's time
// forward. Errors are Record's, and strategy.CheckBurst's for n ≠ 0.
func (st *Store) Peek(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Snapshot, error) {
	if s != nil && n != 0 {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Snapshot{}, err
		}
	}
	r, err := st.run(ctx, s, key, "peek", int64(n), time.Time{})
	if err != nil {
		return strategy.Snapshot{}, err
	}
	rules := s.Rules()
	nr := len(rules)
	if len(r) != 3+3*nr {
		return strategy.Snapshot{}, fmt.Errorf("ratemonitor: redis store: peek: unexpected reply %v", r)
	}
	snap := strategy.Snapshot{Wait: time.Duration(r[0]) * time.Microsecond, Usage: make([]strategy.Usage, nr)}
	if pu := r[2+nr]; pu > 0 {
		snap.PausedUntil = time.UnixMicro(pu)
	}
	for i, rule := range rules {
		used := int(r[2+i])
		u := strategy.Usage{Rule: rule, Used: used, Remaining: max(0, rule.EffectiveLimit()-used)}
		if rr, ra := r[3+nr+2*i], r[4+nr+2*i]; rr >= 0 {
			u.Reported, u.ReportedAt = int(rr), time.UnixMicro(ra)
		}
		snap.Usage[i] = u
	}
	return snap, nil
}

// Sync implements cache.Syncer: one round trip. The pause is a key of its own that expires
// Slack after the pause ends; a Reserve or Peek by any process reads it. Errors are Record's,
// and an error wrapping strategy.ErrInvalidUpdate for an invalid update.
func (st *Store) Sync(ctx context.Context, s *strategy.Strategy, key string, u strategy.Update) error {
	if s == nil {
		return errors.New("ratemonitor: redis store: nil strategy")
	}
	if err := s.CheckUpdate(u); err != nil {
		return err
	}
	// Pause in whole µs, rounded up so that it never ends early.
	pause := int64((u.Pause + time.Microsecond - 1) / time.Microsecond)
	extra := make([]any, 0, 1+4*len(u.Reports))
	extra = append(extra, len(u.Reports))
	for _, r := range u.Reports {
		// Resets in whole µs, rounded up: raised requests never stop counting early.
		reset := int64((r.Reset + time.Microsecond - 1) / time.Microsecond)
		extra = append(extra, s.SlotOf(r.Rule)+1, r.Remaining, r.Used, reset)
	}
	_, err := st.run(ctx, s, key, "sync", pause, time.Time{}, extra...)
	return err
}

// Close marks the store closed; later calls return cache.ErrClosed. The client stays open.
func (st *Store) Close() error {
	st.closed.Store(true)
	return nil
}

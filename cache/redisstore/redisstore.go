// Package redisstore is a cache.Store in Redis (6.0 or later, for SET KEEPTTL), so that many processes share one allocation per
// key (a Xero tenant's 60 per minute is shared by every worker that calls Xero for it). It holds
// the rolling window (rollingwindow), the fixed window (fixedwindow) and the token bucket
// (tokenbucket), each with a Lua script of its own that mirrors the strategy's Counter exactly.
//
// Every operation is one round trip for all rules of a key: a Lua script, loaded once and run
// with EVALSHA (on NOSCRIPT, after a restart, failover or SCRIPT FLUSH, it is loaded and run
// once more). The script reads Redis TIME, so no client's clock decides. A logical key's whole
// state under an algorithm — every counter, the pause, the reported figures, the clock offset —
// is one Redis string (see Keys and state.lua), so an operation touches exactly one key: it
// never meets a half-migrated slot's TRYAGAIN for a sibling key, and an eviction takes all of a
// key's state or none. Keys carry a {hash tag} (Redis Cluster works), user keys are encoded so
// that none can reach another's, and every key the script writes has a TTL, set in the same
// script only when it must move (else SET KEEPTTL): the newest request's window plus a small
// slack (rolling window), the end of the current window plus slack (fixed window), the instant
// the bucket is full again plus slack (token bucket). A key that holds what the script cannot
// read (another type, another layout or version, a truncated value) is started afresh and the
// loss reported to Options.Observer (observe.StateLost, Op "corrupt"); no key is locked out.
//
// Instants are whole microseconds (Redis TIME's resolution), so every rule's effective window
// must be whole microseconds too.
//
// Clock steps (docs/reliability.md#clock-steps, engine.Rebase): each logical key keeps a clock offset (µs, ≥ 0,
// in its value), and its instant is Redis TIME +
// that offset. When Redis's clock has stepped back by more than engine.StepTolerance behind
// the latest instant the key has seen, the script raises the offset so that the key continues
// from that instant, and writes it with the key, instead of rewriting the key's buckets. So a
// full limit stays full for exactly the rest of its window on the new clock, nothing recorded
// is lost, and no key is locked out until the clock catches up. Within the tolerance, the key
// is answered at its latest instant and every wait is measured from the caller's instant, as
// under engine.Strategy. Every instant the store returns (Result.At, Decision.At, a pause's
// end, a report's instant) is on the key's timeline, which is what Release takes back; TTLs
// are durations, so on Redis's own clock. Under the fixed window the count stays in its
// window of the key's timeline, where the other stores carry it into the window of the new
// clock: the two differ only for a step that is not a whole number of windows. Sync (upstream pauses and reported usage) is kept for the
// rolling window only.
package redisstore

import (
	"context"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/internal/storeobs"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

//go:embed state.lua
var stateSource string

//go:embed rollingwindow.lua
var rollingSource string

//go:embed fixedwindow.lua
var fixedSource string

//go:embed tokenbucket.lua
var bucketSource string

var (
	rollingScript = redis.NewScript(rollingSource) // self-contained: see its header
	fixedScript   = redis.NewScript(stateSource + fixedSource)
	bucketScript  = redis.NewScript(stateSource + bucketSource)
)

// kind is the algorithm a strategy runs under, so the script that holds it.
type kind int

const (
	rolling kind = iota
	fixed
	bucket
)

// plan is what the store needs for one strategy, built once: its script, the doubles of the
// script's argument fixed by the strategy (slots and rules), the value prefix of a key that
// holds exactly its slots, and the key's suffix (magic and layout version; see state.go).
type plan struct {
	kind         kind
	script       *redis.Script
	nums         []float64
	pre          string
	suffix       string
	slots, rules int
}

// MaxBuckets bounds W/G for a rule kept in Redis: the script walks the oldest buckets of a key
// to answer a wait, and Redis serves nobody else meanwhile. A day window asked for in 1 s buckets
// (86 400) is refused, by ratemonitor.New (cache.Traits.Validate) and by every operation; at 10 s,
// 1 min or the default for a day (24 min, strategy.DefaultGranularityFor) it is fine.
const MaxBuckets = 10_000

// Defaults of Options.
const (
	DefaultPrefix  = "ratemonitor"
	defaultTimeout = 100 * time.Millisecond
	defaultSlack   = time.Second
)

// Options configures New. The zero value gives the defaults.
type Options struct {
	// Prefix starts every Redis key (default "ratemonitor"). It must not contain '{' or '}'.
	Prefix string
	// MaxInFlight is how many operations may be sent to Redis at once; the others wait their
	// turn, for as long as their caller's context allows, before Timeout starts. Without it a
	// burst larger than the client's connection pool spends its Timeout waiting for a
	// connection, fails, and the connections of scripts cut off mid-flight are thrown away,
	// which makes the next burst worse. Under a Cluster client the budget is per master (each
	// has a pool of its own). Default: the client's PoolSize (go-redis: 10 per CPU; a
	// Cluster client's, per node: 5 per CPU), or 10 per CPU for other clients.
	MaxInFlight int
	// Timeout bounds each operation's round trip (default 100 ms), from the moment it has a
	// connection's turn (see MaxInFlight). When it passes, the operation fails with an error
	// wrapping context.DeadlineExceeded, and it is never retried: the script may already have
	// counted.
	Timeout time.Duration
	// Slack is how long a key outlives its window (default 1 s): every key's TTL is at least
	// its window and at most window + Slack past the latest request it holds.
	Slack time.Duration
	// Clock, for tests only, replaces Redis TIME as the source of instants. Leave it nil in
	// production so that every process sharing the store shares Redis's clock.
	Clock clock.Clock
	// Observer, when set, receives a StoreError event (Store "redis") for each operation
	// that failed: closed store, timeout, Redis unreachable (see package observe); and a
	// StateLost event (Op "corrupt", Err saying what was found) when an operation found its
	// key holding a value it could not read and started the key afresh.
	Observer observe.Observer
	// AllowEviction lets New accept a server whose maxmemory-policy may evict the store's keys
	// (any policy but noeviction, with maxmemory set), which New refuses otherwise: an evicted
	// key's counts start again from zero. The monitor then reports each eviction it sees as an
	// observe.StateLost event (see CheckInterval). Without it, a policy that becomes evicting
	// later (CONFIG SET, a failover to a master set so) fails operations with New's error
	// within one CheckInterval, until it is fixed (docs/stores.md#eviction-restarts-fleet-size).
	AllowEviction bool
	// CheckInterval is how often the store asks each server whether it restarted or evicted
	// keys (observe.StateLost events) and writes its heartbeat for Processes (default 1 s;
	// negative: never, and Processes returns 0; New refuses 0 < CheckInterval <
	// 100 ms). Each check reads every current master's INFO (run_id, evicted_keys,
	// the eviction policy) and writes the Store's heartbeat, which expires after 3 intervals;
	// Processes counts the heartbeats alive (docs/stores.md#eviction-restarts-fleet-size).
	CheckInterval time.Duration
}

// Store is a cache.Store in Redis. It is safe for concurrent use; Close does not close the
// client, which is the caller's.
type Store struct {
	client  redis.UniversalClient
	opts    Options
	closed  atomic.Bool
	static  sync.Map // *engine.Strategy → *plan
	statics atomic.Int64
	route   *route      // where each operation goes, and its server's turns (route.go)
	policy  *policyGate // the eviction-policy check (evictpolicy.go)
	mon     *monitor    // loss reports and heartbeat; nil when CheckInterval < 0 (monitor.go)

	// leaseTag and leaseSeq make lease ids (lease.go).
	leaseOnce sync.Once
	leaseTag  string
	leaseSeq  atomic.Uint64
	cutoffs   cutoffs // releases of leases whose acquire was cut off (lease_cutoff.go)

	sharing cache.Sharing // the Transports and counter claims over this Store value (Describe)
}

var (
	_ cache.Store     = (*Store)(nil)
	_ cache.Syncer    = (*Store)(nil)
	_ cache.Describer = (*Store)(nil)
)

// New returns a store over client, which may be a single-node, Sentinel (failover), Cluster or
// Ring client. Two client settings are required, and New refuses a *redis.Client,
// *redis.ClusterClient or *redis.Ring without them: MaxRetries: -1 (go-redis retries a command
// whose reply was lost, which would replay a script that may have counted; the Ring's default
// is 3) and ContextTimeoutEnabled: true (so that Options.Timeout bounds each operation). The
// store sends its scripts as commands go-redis never retries, so a Cluster client's
// MaxRedirects, which go-redis also spends on EOF and timeouts, is safe at any value: it bounds
// MOVED and ASK redirects only. New also refuses invalid options, and a server
// that may evict the store's keys (maxmemory set and a maxmemory-policy other than noeviction)
// unless Options.AllowEviction is set; a server it cannot reach is checked later instead (in
// the background, at most once a second, until it answers). New asks the servers within Options.Timeout; NewContext takes a context too.
// It starts the store's monitor (Options.CheckInterval), which Close stops.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	return NewContext(context.Background(), client, opts)
}

// NewContext is New, asking the servers within ctx and Options.Timeout, whichever ends first.
func NewContext(ctx context.Context, client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil || reflect.ValueOf(client).Kind() == reflect.Pointer && reflect.ValueOf(client).IsNil() {
		return nil, errors.New("ratemonitor: redis store: nil client")
	}
	retries, ctxTimeouts, pool := 0, true, 0
	switch c := client.(type) {
	case *redis.Client:
		retries, ctxTimeouts, pool = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled, c.Options().PoolSize
	case *redis.ClusterClient:
		retries, ctxTimeouts, pool = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled, c.Options().PoolSize
	case *redis.Ring:
		retries, ctxTimeouts, pool = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled, c.Options().PoolSize
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
		opts.Timeout = defaultTimeout
	}
	if opts.Slack == 0 {
		opts.Slack = defaultSlack
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = defaultCheckInterval
	}
	if err := checkInterval(opts.CheckInterval); err != nil {
		return nil, err
	}
	if opts.Timeout < 0 || opts.Slack < 0 || opts.MaxInFlight < 0 {
		return nil, fmt.Errorf("ratemonitor: redis store: Timeout %v, Slack %v and MaxInFlight %d must not be negative", opts.Timeout, opts.Slack, opts.MaxInFlight)
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = pool
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = 10 * runtime.GOMAXPROCS(0)
	}
	st := &Store{client: client, opts: opts, route: newRoute(client, opts.MaxInFlight),
		policy: &policyGate{allow: opts.AllowEviction}}
	if err := st.checkPolicy(ctx, true); err != nil {
		return nil, err
	}
	st.startMonitor()
	return st, nil
}

// Keys returns the one Redis key that holds key's state under s: every counter's, the pause,
// the reported figures and the clock offset, in one string (state.lua gives its layout),
// "prefix:{k<base64url key>}:rw1" (rolling window), ":fw1" (fixed window) or ":tb1" (token
// bucket). Strategies of one algorithm share the key of a logical key, each counter kept once
// by its counter ID, so that rules of the same counter share one count. For inspection and
// tests; nil for a strategy the store cannot hold.
func (st *Store) Keys(s *engine.Strategy, key string) []string {
	pl, err := st.plan(s)
	if err != nil {
		return nil
	}
	return []string{st.opts.Prefix + ":{k" + base64.RawURLEncoding.EncodeToString([]byte(key)) + "}:" + pl.suffix}
}

// run executes op for key under s and returns the script's reply.
func (st *Store) run(ctx context.Context, s *engine.Strategy, key, op string, n int64, at time.Time, extra ...float64) ([]int64, error) {
	if st.closed.Load() {
		return nil, st.failed(ctx, op, key, cache.ErrClosed)
	}
	if err := st.gate(ctx); err != nil {
		return nil, st.failed(ctx, op, key, err)
	}
	pl, err := st.plan(s)
	if err != nil {
		return nil, err
	}
	now, atMicros := int64(-1), int64(0)
	if st.opts.Clock != nil {
		now = st.opts.Clock.Now().UnixMicro()
	}
	if !at.IsZero() {
		atMicros = at.UnixMicro()
	}
	// One argument, packed doubles (state.go, state.lua): each ARGV costs the server a
	// tonumber, struct.unpack reads them all at once.
	args := []any{pl.argv(op, n, now, atMicros, extra)}
	// The key's server's turn, the timeout and a script that is never replayed: route.go.
	res, err := st.exec(ctx, op, key, pl.script, st.Keys(s, key), args)
	if err != nil {
		return nil, err
	}
	return st.settled(key, res)
}

// failed reports err on op and key to the observer, if any, and returns it.
func (st *Store) failed(ctx context.Context, op, key string, err error) error {
	if st.opts.Observer == nil {
		return err
	}
	return storeobs.Failed(ctx, st.opts.Observer, "redis", op, key, err)
}

// Admit implements cache.Admitter: one round trip, which decides, records and returns every
// rule's state exactly as engine.Strategy.Admit does (under the fixed window a refused attempt
// is counted too). Under the rolling window a pause set by Sync does not hold an admission, as
// in the strategy. Durations are exact (token bucket: to the ns; others: whole µs), At is the
// key's instant (Redis TIME + the key's clock offset, see the package doc). Errors are Record's,
// and engine.Strategy.CheckBurst's for the burst.
func (st *Store) Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error) {
	if s != nil {
		if err := s.CheckBurst(n); err != nil {
			return strategy.Decision{}, err
		}
	}
	r, err := st.run(ctx, s, key, "admit", int64(n), time.Time{})
	if err != nil {
		return strategy.Decision{}, err
	}
	nr := s.NumRules()
	if len(r) != 4+3*nr {
		return strategy.Decision{}, fmt.Errorf("ratemonitor: redis store: admit: unexpected reply %v", r)
	}
	d := strategy.Decision{Allowed: r[0] == 1, RetryAfter: duration(r[1], r[2]), At: time.UnixMicro(r[3]),
		Rules: make([]strategy.RuleState, nr)}
	for i := range nr {
		rule, used := s.Rule(i), int(r[4+3*i])
		d.Rules[i] = strategy.RuleState{Rule: rule, Used: used, Remaining: max(0, rule.EffectiveLimit()-used),
			Reset: duration(r[5+3*i], r[6+3*i])}
	}
	return d, nil
}

// duration is a script's duration: whole µs, then the ns beyond them.
func duration(us, ns int64) time.Duration {
	return time.Duration(us)*time.Microsecond + time.Duration(ns)
}

// validate reports whether the store can hold s (Describe says which it can); every operation
// checks it too.
func (st *Store) validate(s *engine.Strategy) error {
	_, err := st.plan(s)
	return err
}

// maxBucketTokens bounds the whole tokens a token bucket kept in Redis may owe: its Lua script
// counts them in a Lua number, exact below 2^53. Monitoring (Record) can run a bucket's debt up
// to what refills in strategy.MaxWindow, capped at 2^63 − 1 token·ns (bucket.Bucket); a
// rule whose cap, in whole tokens, reaches 2^53 is refused. Only windows under 2 µs can.
const maxBucketTokens = 1 << 53

// plan returns the script and the script arguments that depend only on the strategy, built
// once per strategy.
func (st *Store) plan(s *engine.Strategy) (*plan, error) {
	if s == nil {
		return nil, errors.New("ratemonitor: redis store: nil strategy")
	}
	if v, ok := st.static.Load(s); ok {
		return v.(*plan), nil
	}
	var pl *plan
	var err error
	switch s.Name() {
	case "rollingwindow":
		pl, err = st.rollingPlan(s)
	case "fixedwindow":
		pl, err = st.fixedPlan(s)
	case "tokenbucket":
		pl, err = st.bucketPlan(s)
	default:
		return nil, fmt.Errorf("ratemonitor: redis store: no script for strategy %q (want rollingwindow, fixedwindow or tokenbucket)", s.Name())
	}
	if err != nil {
		return nil, err
	}
	if st.statics.Add(1) > 1024 {
		// Strategies are meant to live as long as their Transports; if callers make them per
		// request, start the cache afresh rather than grow it without bound.
		st.static.Clear()
		st.statics.Store(1)
	}
	st.static.Store(s, pl)
	return pl, nil
}

// wholeMicros checks that every rule's effective window is whole microseconds, the store's
// resolution.
func wholeMicros(s *engine.Strategy) error {
	for _, r := range s.Rules() {
		if r.EffectiveWindow()%time.Microsecond != 0 {
			return fmt.Errorf("ratemonitor: redis store: rule %s: window+margin %v must be whole microseconds", r, r.EffectiveWindow())
		}
	}
	return nil
}

// ruleArgs appends per rule its slot (1-based) and effective limit, refusing limits above
// storecheck.MaxCount, and makes the plan: the doubles, the value prefix and the key's suffix.
func ruleArgs(s *engine.Strategy, k kind, script *redis.Script, magic string, args []float64) (*plan, error) {
	rules := s.Rules()
	for i, r := range rules {
		if r.EffectiveLimit() > storecheck.MaxCount {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s: limit above %d", r, storecheck.MaxCount)
		}
		args = append(args, float64(s.SlotOf(i)+1), float64(r.EffectiveLimit()))
	}
	pre, err := statePrefix(magic, s)
	if err != nil {
		return nil, err
	}
	return &plan{kind: k, script: script, nums: args, pre: pre, suffix: magic + layout, slots: s.Slots(), rules: len(rules)}, nil
}

func (st *Store) rollingPlan(s *engine.Strategy) (*plan, error) {
	args := []float64{float64(st.opts.Slack.Microseconds())}
	for j := range s.Slots() {
		if T, b, ok := s.SmoothSlot(j); ok {
			// A GCRA (engine.Strategy.Smoothed): its span b·T in W's place, −T in G's (rollingwindow.lua,
			// "Smoothing").
			args = append(args, float64(int64(b)*T.Microseconds()), float64(-T.Microseconds()))
			continue
		}
		r := s.SlotRule(j)
		w, g := r.EffectiveWindow(), r.Bucket()
		if w%time.Microsecond != 0 || g%time.Microsecond != 0 {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s: window and granularity must be whole microseconds", r)
		}
		if b := w / g; b > MaxBuckets {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s keeps up to %d buckets per key; the script may walk them all while Redis waits: "+
				"set its Granularity to at least %v (%d buckets at most)", r, b+1, (w+MaxBuckets-1)/MaxBuckets, MaxBuckets)
		}
		args = append(args, float64(w.Microseconds()), float64(g.Microseconds()))
	}
	return ruleArgs(s, rolling, rollingScript, rollingMagic, args)
}

func (st *Store) fixedPlan(s *engine.Strategy) (*plan, error) {
	if err := wholeMicros(s); err != nil {
		return nil, err
	}
	args := []float64{float64(st.opts.Slack.Microseconds())}
	for j := range s.Slots() {
		args = append(args, float64(s.SlotRule(j).EffectiveWindow().Microseconds()))
	}
	return ruleArgs(s, fixed, fixedScript, fixedMagic, args)
}

func (st *Store) bucketPlan(s *engine.Strategy) (*plan, error) {
	if err := wholeMicros(s); err != nil {
		return nil, err
	}
	args := []float64{float64(st.opts.Slack.Microseconds())}
	for j := range s.Slots() {
		r := s.SlotRule(j)
		capacity, w := int64(r.Limit), int64(r.EffectiveWindow())
		if capacity > storecheck.MaxCount {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s: a token bucket's capacity must not exceed %d", r, storecheck.MaxCount)
		}
		// The debt cap of bucket.Bucket (what refills in strategy.MaxWindow, at most
		// 2^63 − 1 token·ns), as whole tokens q, then µs r and ns s beyond them.
		maxDebt := int64(math.MaxInt64)
		if capacity <= math.MaxInt64/int64(strategy.MaxWindow) {
			maxDebt = capacity * int64(strategy.MaxWindow)
		}
		q, rest := maxDebt/w, maxDebt%w
		if q >= maxBucketTokens {
			return nil, fmt.Errorf("ratemonitor: redis store: rule %s: a token bucket in Redis counts the tokens it owes in a Lua number, exact below 2^53, "+
				"and monitoring can run this one up to %d; lengthen the window (2 µs or more)", r, q)
		}
		args = append(args, float64(capacity), float64(w/int64(time.Microsecond)), float64(q), float64(rest/1000), float64(rest%1000))
	}
	return ruleArgs(s, bucket, bucketScript, bucketMagic, args)
}

// explain wraps a failed call's error with what happened: the caller's own cancellation or
// deadline, the store's timeout, or the client's.
func (st *Store) explain(parent context.Context, op, key, addr string, took time.Duration, err error) error {
	var ne net.Error
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	if dl, ok := parent.Deadline(); ok && timedOut && parent.Err() == nil && !time.Now().Before(dl) {
		// The client sets a connection's deadline to the context's, and it can fire a moment
		// before the context's own timer: the caller's deadline has passed, so the failure is
		// the caller's. Return once the context says so, so that no one (the Transport's
		// degraded mode, an error handler) takes it for the store's.
		<-parent.Done()
	}
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
	return fmt.Errorf("ratemonitor: redis store%s: %s on key %q: %w", atAddr(addr), op, key, err)
}

// Record implements cache.Store: one round trip. Errors: cache.ErrInvalidCount for n outside
// 1..2^31; a strategy the store cannot hold (Describe); cache.ErrClosed after Close;
// and the call's own failure, which wraps context.DeadlineExceeded when the store's Timeout
// passed, the caller's context error when that ended first (a call the caller's deadline ends
// returns once ctx.Err says so), and otherwise the client's error (connection refused, say).
func (st *Store) Record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	if err := storecheck.Count(n); err != nil {
		return err
	}
	_, err := st.run(ctx, s, key, "record", int64(n), time.Time{})
	return err
}

// Reserve implements cache.Store: one round trip. Result.At is the key's instant (µs
// resolution); Result.Wait is in µs steps, to the ns under the token bucket. Errors are Record's, and engine.Strategy.CheckBurst's
// for the burst. A Reserve cut off by a timeout may still have recorded: its slots are then held
// until they expire.
func (st *Store) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	if s != nil {
		if err := s.CheckBurst(n); err != nil {
			return engine.Result{}, err
		}
	}
	if err := storecheck.Count(n); err != nil {
		return engine.Result{}, err
	}
	r, err := st.run(ctx, s, key, "reserve", int64(n), time.Time{})
	if err != nil {
		return engine.Result{}, err
	}
	switch {
	case len(r) == 3: // rolling window: {allowed, wait µs, at}
		return engine.Result{Allowed: r[0] == 1, Wait: time.Duration(r[1]) * time.Microsecond, At: time.UnixMicro(r[2])}, nil
	case len(r) == 4 && r[0] == 1: // {allowed, wait µs, wait ns, at}
		return engine.Result{Allowed: true, At: time.UnixMicro(r[3])}, nil
	case len(r) == 4:
		return engine.Result{Wait: duration(r[1], r[2])}, nil
	}
	return engine.Result{}, fmt.Errorf("ratemonitor: redis store: reserve: unexpected reply %v", r)
}

// Release implements cache.Store: one round trip. Errors are Record's.
func (st *Store) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	if err := storecheck.Count(n); err != nil {
		return err
	}
	_, err := st.run(ctx, s, key, "release", int64(n), at)
	return err
}

// Peek implements cache.Store: one round trip, which writes only to move the key's time
// forward. Errors are Record's, and engine.Strategy.CheckBurst's for n ≠ 0.
func (st *Store) Peek(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Snapshot, error) {
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
	if pl, _ := st.plan(s); pl.kind != rolling {
		// {wait µs, wait ns, used...}
		if len(r) != 2+nr {
			return strategy.Snapshot{}, fmt.Errorf("ratemonitor: redis store: peek: unexpected reply %v", r)
		}
		snap := strategy.Snapshot{Wait: duration(r[0], r[1]), Usage: make([]strategy.Usage, nr)}
		for i, rule := range rules {
			used := int(r[2+i])
			snap.Usage[i] = strategy.Usage{Rule: rule, Used: used, Remaining: max(0, rule.EffectiveLimit()-used)}
		}
		return snap, nil
	}
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

// errSyncUnsupported is wrapped by Sync under a strategy other than the rolling window: the
// fixed-window and token-bucket scripts keep no pause and no reported figures.
var errSyncUnsupported = errors.New("ratemonitor: redis store: Sync (upstream pause and reported usage) is supported for the rolling window only")

// Sync implements cache.Syncer for the rolling window: one round trip. The pause is kept in the
// key's value, whose TTL lasts until Slack after the pause ends; a Reserve or Peek by any
// process reads it.
// Errors are Record's, an error wrapping engine.ErrInvalidUpdate for an invalid update, and
// an error under another strategy (nothing is changed).
func (st *Store) Sync(ctx context.Context, s *engine.Strategy, key string, u engine.Update) error {
	if s == nil {
		return errors.New("ratemonitor: redis store: nil strategy")
	}
	pl, err := st.plan(s)
	if err != nil {
		return err
	}
	if pl.kind != rolling {
		return fmt.Errorf("%w; strategy %q, key %q", errSyncUnsupported, s.Name(), key)
	}
	if err := s.CheckUpdate(u); err != nil {
		return err
	}
	// Pause in whole µs, rounded up so that it never ends early.
	pause := int64((u.Pause + time.Microsecond - 1) / time.Microsecond)
	extra := make([]float64, 0, 1+5*len(u.Reports))
	extra = append(extra, float64(len(u.Reports)))
	for _, r := range u.Reports {
		// Resets in whole µs, rounded up: raised requests never stop counting early.
		reset := int64((r.Reset + time.Microsecond - 1) / time.Microsecond)
		fixed := 0.0 // not fixed; else the rule's limit, which the script compares with
		if r.Fixed {
			fixed = float64(s.Rule(r.Rule).EffectiveLimit())
		}
		extra = append(extra, float64(s.SlotOf(r.Rule)+1), float64(r.Remaining), float64(r.Used), float64(reset), fixed)
	}
	_, err = st.run(ctx, s, key, "sync", pause, time.Time{}, extra...)
	return err
}

// Close marks the store closed; later calls return cache.ErrClosed. It stops the monitor
// (waiting for a check in flight) and removes the store's heartbeat, within Options.Timeout,
// best effort. The client stays open. Close always returns nil.
func (st *Store) Close() error {
	if !st.closed.Swap(true) {
		st.closeCutOffs()
		st.closeMonitor()
	}
	return nil
}

// Describe implements cache.Describer. The store is shared by processes (Processes counts
// them), and names its data in Namespace: "redis <address> db <n> prefix <prefix>", a Cluster
// by its addresses, a client of another kind by its pointer. Its Validate accepts a strategy
// under the rolling window, the fixed window or the token bucket whose rules have
// whole-microsecond effective windows and limits up to 2^31; under the rolling
// window, whole-microsecond granularities and at most MaxBuckets buckets per rule; under the
// token bucket, a debt cap whose whole tokens stay below 2^53.
//
// Each Store value has a Sharing of its own, even over the server and prefix of another: a
// Transport stacked on one over another Store value there counts an attempt again (an
// over-count, never an under-count), and cache.ErrCounterConflict is checked per Store value,
// as it is per process: give Transports and Limiters that share the data the same rules.
func (st *Store) Describe() cache.Traits {
	return cache.Traits{Namespace: st.namespace(), Processes: st.Processes, Validate: st.validate, Sharing: &st.sharing}
}

// namespace names the Redis data the store keeps its state in (Describe).
func (s *Store) namespace() string {
	where := fmt.Sprintf("%p", s.client)
	switch c := s.client.(type) {
	case *redis.Client:
		where = fmt.Sprintf("%s db %d", c.Options().Addr, c.Options().DB)
	case *redis.ClusterClient:
		where = "cluster " + strings.Join(c.Options().Addrs, ",")
	}
	return "redis " + where + " prefix " + s.opts.Prefix
}

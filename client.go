package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/internal/contend"
	"github.com/ratemonitor/ratemonitor/internal/credential"
	"github.com/ratemonitor/ratemonitor/internal/degrade"
	"github.com/ratemonitor/ratemonitor/internal/lograte"
	"github.com/ratemonitor/ratemonitor/internal/storeshare"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// ErrNotConfigured is returned by the methods of a Transport not made by New, and by those that
// need rules (AllocationUsed, WaitTime, Wait, Reserve, Meter) of one made without rules.
var ErrNotConfigured = errors.New("ratemonitor: the Transport has no rules: made without WithRules, Status gives what it learned; a Transport not made by New has none either")

// StoreErrorPolicy says what RoundTrip does when the store fails to record a request.
type StoreErrorPolicy int

const (
	// SendUncounted sends the request anyway and reports the error to the error handler and the
	// logger. The count for that request is lost, so waits may come out early: during an
	// outage of a shared store nothing is paced at all. The default for monitoring
	// Transports.
	SendUncounted StoreErrorPolicy = iota
	// SendNothing sends nothing and returns a *StoreError from RoundTrip.
	SendNothing
	// Degrade paces on a memory store of the Transport's own, at this process's share of each
	// limit, while the shared store is unreachable, and goes back to the shared store when it
	// answers (settings: WithDegraded, DegradedConfig). The default for paced Transports
	// (WithPacing). An outage is any error of the shared store but the caller's own (its context
	// ended), contention (cache.ErrContended), a closed store (cache.ErrClosed) and errors about
	// the request itself. A degraded key waits one longest window before its first local grant,
	// and the local grants are carried into the shared store on return. Errors degraded mode does
	// not cover, and every error of an in-process store (cache.Memory), are handled as under
	// SendNothing. See docs/fleet.md#degraded-mode.
	Degrade
)

// String returns "send uncounted", "send nothing" or "degrade".
func (p StoreErrorPolicy) String() string {
	switch p {
	case SendUncounted:
		return "send uncounted"
	case SendNothing:
		return "send nothing"
	case Degrade:
		return "degrade"
	}
	return fmt.Sprintf("StoreErrorPolicy(%d)", int(p))
}

// StoreError is returned by RoundTrip under SendNothing when the store could not record the
// request. Nothing was sent.
type StoreError struct {
	Key string // the key the request was counted under
	Err error  // the store's error, such as cache.ErrClosed or a Redis timeout
}

// Error says that the request was not sent, for which key, and why.
func (e *StoreError) Error() string {
	return fmt.Sprintf("ratemonitor: not sent: recording the request under key %q failed: %v", e.Key, e.Err)
}

// Unwrap returns the store's error, for errors.Is and errors.As.
func (e *StoreError) Unwrap() error { return e.Err }

// Transport is an http.RoundTripper that records each attempt in a Store before passing it to
// its base RoundTripper. It never modifies the request, and returns the base's response and
// error untouched; every attempt that reaches the base is recorded once per rule (failures,
// 429s, retries and redirect hops included). Stacked Transports over one store count an
// attempt once in each counter (docs/rules.md#several-rules-on-one-key).
//
// Make one with New. The zero Transport records nothing: its RoundTrip passes every request to
// http.DefaultTransport and its methods return ErrNotConfigured. A Transport is safe for
// concurrent use.
type Transport struct {
	base    http.RoundTripper
	strat   *engine.Strategy // the request's rules (WithRules, WithStrategy)
	meters  []*meter         // WithMeter, WithAppRules, in the order given
	keyFunc KeyFunc
	clock   clock.Clock
	store   cache.Store
	ops     cache.Store // where operations go: store, or fail.deg under Degrade
	logger  *slog.Logger
	obs     observe.Observer
	sync    *SyncConfig // WithSync
	fail    failing     // what a store error does
	pace    pacing      // WithPacing, WithSmoothing, Reserve
	costs   costing     // WithCost, WithCostReport
	// inflight limits the requests in flight (inflight.go); nil without in-flight options.
	inflight *inflight
	share    sharing  // how the store is shared with other Transports
	setup    settings // what options asked for that New settles
}

// failing is what a Transport does when its store fails.
type failing struct {
	policy  StoreErrorPolicy
	deg     *degrade.Store // StoreErrorPolicy Degrade over a shared store
	onError func(req *http.Request, key string, err error)
	// storeWarn and syncWarn rate-limit the warnings about store errors.
	storeWarn, syncWarn lograte.Limiter
}

// pacing is what a paced Transport keeps: the queues of waiters per key, and whether a
// Reservation may exist.
type pacing struct {
	on     bool // WithPacing
	smooth bool // WithSmoothing
	queues pacer
	// reserves is set by the first Reserve: before it, no request can carry a Reservation of
	// this Transport, and RoundTrip does not look for one.
	reserves atomic.Bool
	// gate holds requests on a key whose state is unknown until the first answer (gate.go);
	// nil without WithSync and a reader of remaining counts.
	gate *firstGate
}

// costing is what a request costs: WithCost's function, WithCostReport's reader, whether
// every request costs 1 everywhere (no WithCost, no Meter.Cost), and the charges on the meters
// when they are the same for every request.
type costing struct {
	fn     func(*http.Request) int
	report cost.Reader
	unit   bool
	// fixed are every request's charges on the meters when they never vary (meterLimits).
	fixed []meterCharge
}

// sharing is how the store is shared: whether New made it (Close closes it), whether it
// contends, and what marks and counts the Transports over it (storeuse.go).
type sharing struct {
	own      bool
	contends bool // the store can fail with cache.ErrContended: see storecalls.go
	// recordTurns and recordMeterTurns order monitoring-mode records on a contending store.
	recordTurns, recordMeterTurns contend.Turns
	// id makes a mark this store's: its cache.Sharing, or the store itself when it has none;
	// users counts the Transports over a store with a Sharing, and alwaysMark says to mark
	// every attempt whatever the count.
	id         any
	users      *storeshare.Users
	alwaysMark bool
}

// settings is what options asked for that New settles once all are applied.
type settings struct {
	clockSet    bool            // WithClock
	policySet   bool            // WithStoreErrorPolicy
	degradedCfg *DegradedConfig // WithDegraded
	inflight    inflightConfig  // WithInFlight, WithAppInFlight, WithInFlightLease, Meter.InFlight
	// learnedMeters are WithMeter's meters with no rules and no InFlight: without rules, their
	// limits are learned from WithCostReport's figures; with rules, New refuses them.
	learnedMeters []*meter
}

// errTwoStrategies is the cause of the error WithRules or WithStrategy returns when the
// rules are already set.
var errTwoStrategies = errors.New("the rules are already set (WithRules or WithStrategy given twice): give them once")

// Option configures New.
type Option func(*Transport) error

// WithRules sets the rules, each a rolling window (the default strategy; WithStrategy takes
// another), all layered on every key: a request fits when it fits every rule. New fails when a
// rule is invalid (see strategy.Rule.Validate).
func WithRules(rules ...strategy.Rule) Option {
	rules = slices.Clone(rules) // the option is a value: the caller may reuse the slice
	return func(t *Transport) error {
		if t.strat != nil {
			return optionErr("WithRules", errTwoStrategies)
		}
		s, err := rollingwindow.New(rules...)
		if err != nil {
			return optionErr("WithRules", err)
		}
		t.strat = s
		return nil
	}
}

// WithStrategy sets a ready-made layered strategy, as an alternative to WithRules: the way to
// pace under the fixed window (fixedwindow.New) or the token bucket (tokenbucket.New).
func WithStrategy(s *engine.Strategy) Option {
	return func(t *Transport) error {
		if s == nil {
			return errors.New("ratemonitor: WithStrategy(nil): give a strategy, such as fixedwindow.New(rules...)")
		}
		if t.strat != nil {
			return optionErr("WithStrategy", errTwoStrategies)
		}
		t.strat = s
		return nil
	}
}

// WithStore sets where counts live. Without it, New makes a cache.Memory store with the
// Transport's clock, and Close closes it; a store given here is the caller's to close. A store
// with a clock of its own (cache.Traits.Clock, such as cache.Memory's) is the Transport's clock
// too.
func WithStore(s cache.Store) Option {
	return func(t *Transport) error {
		if s == nil || isNilPointer(s) {
			return errors.New("ratemonitor: WithStore(nil)")
		}
		t.store = s
		return nil
	}
}

// sameClock compares clocks without panicking on a clock type that is not comparable.
func sameClock(a, b clock.Clock) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// claim claims the store's counters for the request's rules and each meter's (cache.Sharing).
func (t *Transport) claim(sh *cache.Sharing) error {
	if err := sh.Claim("", t.strat); err != nil {
		return optionErr("WithStore", err)
	}
	for _, m := range t.meters {
		// A meter's keys are its own: an app key, or keys derived under its name.
		scope := "meter " + m.name
		if m.key != "" {
			scope = "app key " + m.key
		}
		if err := sh.Claim(scope, m.strat); err != nil {
			return optionErr(m.opt, err)
		}
	}
	return nil
}

// settleCosts notes, once the meters are known, whether every request costs 1 everywhere
// (costs.unit) and, if so, the charges that are the same for every request (costs.fixed).
func (t *Transport) settleCosts() {
	t.costs.unit = t.costs.fn == nil
	fixed := !t.pace.on
	for _, m := range t.meters {
		t.costs.unit = t.costs.unit && m.cost == nil
		fixed = fixed && m.key != ""
	}
	if fixed && t.costs.unit && len(t.meters) > 0 {
		t.costs.fixed = t.freshLimits("").meters
	}
}

// sameStore compares stores without panicking on a store type that is not comparable.
func sameStore(a, b cache.Store) bool {
	if a == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// WithKeyFunc sets how a request's key is found when its context carries none (see WithKey).
// The default is KeyByHost.
func WithKeyFunc(f KeyFunc) Option {
	return func(t *Transport) error {
		if f == nil {
			return errors.New("ratemonitor: WithKeyFunc(nil)")
		}
		t.keyFunc = f
		return nil
	}
}

// WithClock sets the clock the Transport sleeps on and its default memory store reads instants
// from (default clock.Real(), the monotonic clock). With WithStore, give the clock to the store
// instead (cache.MemoryConfig.Clock): New refuses two different clocks.
func WithClock(c clock.Clock) Option {
	return func(t *Transport) error {
		if c == nil || isNilPointer(c) {
			return errors.New("ratemonitor: WithClock(nil)")
		}
		t.clock, t.setup.clockSet = c, true
		return nil
	}
}

// WithStoreErrorPolicy sets what RoundTrip does when the store fails: default Degrade for paced
// Transports (WithPacing), SendUncounted for monitoring ones.
func WithStoreErrorPolicy(p StoreErrorPolicy) Option {
	return func(t *Transport) error {
		if p != SendUncounted && p != SendNothing && p != Degrade {
			return fmt.Errorf("ratemonitor: WithStoreErrorPolicy(%d): unknown policy: want SendUncounted, SendNothing or Degrade", p)
		}
		t.fail.policy, t.setup.policySet = p, true
		return nil
	}
}

// WithErrorHandler sets a function called with every store error RoundTrip meets, under
// every policy, before the request is sent or refused. Under Degrade the shared store's
// outage is not one: it is met by the degraded mode (observe.Degraded, a warning in the log). It must be safe for concurrent use.
func WithErrorHandler(f func(req *http.Request, key string, err error)) Option {
	return func(t *Transport) error {
		t.fail.onError = f
		return nil
	}
}

// WithLogger sets the logger store errors are reported to (default slog.Default()): at Warn
// level at most once a second, with the number held back since (attribute "suppressed"), and
// at Debug level otherwise. Nothing is logged per request when all is well.
func WithLogger(l *slog.Logger) Option {
	return func(t *Transport) error {
		if l == nil {
			return errors.New("ratemonitor: WithLogger(nil)")
		}
		t.logger = l
		return nil
	}
}

// WithObserver makes o receive the Transport's events (package observe): Recorded for each
// request recorded in monitoring mode, Granted and Refused for each reserve asked of the store
// (pacing, Reserve), Waited for the total time a paced request, Reserve or Wait waited,
// TooManyRequests for each 429 from the upstream, with WithSync, Paused when the upstream
// pauses a key and, under StoreErrorPolicy Degrade, Degraded and Recovered when the shared store
// goes and comes back, and, for a Transport made without rules, LimitChanged for each limit
// learned, changed or set. Store errors are the store's events: give o to the store too
// (cache.MemoryConfig.Observer and the other stores' Options.Observer); the memory store New
// makes when WithStore is not given gets o. Without WithObserver nothing is built or called.
func WithObserver(o observe.Observer) Option {
	return func(t *Transport) error {
		if o == nil || isNilPointer(o) {
			return errors.New("ratemonitor: WithObserver(nil)")
		}
		t.obs = o
		return nil
	}
}

// New returns a Transport that records requests before passing them to base (nil means
// http.DefaultTransport). Without WithRules or WithStrategy it learns its limits, per key, from
// the upstream's answers (the IETF RateLimit fields, X-RateLimit-*; docs/learning.md), and
// refuses the options that need rules known at New. A store that cannot hold the rules
// (cache.Traits.Validate) refuses them here. Errors name the option at fault; no store is left
// open when New fails.
func New(base http.RoundTripper, opts ...Option) (*Transport, error) {
	t := &Transport{base: base, keyFunc: KeyByHost, clock: clock.Real(), logger: slog.Default()}
	t.pace.queues.seed = maphash.MakeSeed()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("ratemonitor: New: option %d is nil: give an Option such as WithRules(...)", i)
		}
		if err := o(t); err != nil {
			return nil, err
		}
	}
	if t.strat == nil {
		// No rules: learned from the upstream's answers (learn.go).
		if err := t.startLearning(); err != nil {
			return nil, err
		}
	} else if len(t.setup.learnedMeters) > 0 {
		return nil, fmt.Errorf("ratemonitor: %s: no rules and no InFlight: give the meter's limits (only a Transport without WithRules learns a meter's limits)", t.setup.learnedMeters[0].opt)
	}
	if err := t.applySmoothing(); err != nil {
		return nil, err
	}
	if err := t.resolvePolicy(); err != nil {
		return nil, err
	}
	learning := t.strat == nil // no rules to check the readers and the store against
	if !learning {
		if err := t.checkReaders(); err != nil {
			return nil, err
		}
	}
	traits := traitsOf(t.store) // the zero Traits for the default memory store, made below
	if err := t.validateRules(traits.Validate); err != nil {
		return nil, err
	}
	if err := t.checkInFlight(); err != nil {
		return nil, err
	}
	if c := traits.Clock; c != nil {
		if t.setup.clockSet && !sameClock(c, t.clock) {
			return nil, errors.New("ratemonitor: WithClock: the store has a clock of its own, another one: give the clock to the store only (cache.MemoryConfig.Clock)")
		}
		t.clock = c
	}
	if t.store == nil {
		m, err := cache.NewMemory(cache.MemoryConfig{Clock: t.clock, Logger: t.logger, Observer: t.obs})
		if err != nil {
			return nil, optionErr("New", fmt.Errorf("the default memory store: %w", err))
		}
		t.store, t.share.own, traits = m, true, m.Describe()
	}
	if _, ok := t.store.(cache.Syncer); t.sync != nil && !ok {
		return nil, errNoSyncer
	}
	if in, ok := t.base.(*Transport); ok && sameStore(in.store, t.store) && (in.strat == nil || learning) {
		// A Transport made without rules does not pass on or read the mark that keeps stacked
		// Transports from counting an attempt twice.
		return nil, errors.New("ratemonitor: New: the base is a Transport over the same store, and one of them has no rules: each would count every request on the meters it learns; use one Transport (SetMeter adds meters to one made without rules), or give both rules")
	}
	// Last, so that a New that fails claims nothing. A store New made itself is new: nothing
	// can conflict there. A store without a Sharing is not checked.
	if sh := traits.Sharing; sh != nil && !t.share.own && !learning {
		if err := t.claim(sh); err != nil {
			return nil, err
		}
	}
	t.share.contends = traits.Contends
	t.settleCosts()
	if err := t.startDegrader(); err != nil {
		return nil, err
	}
	t.startInFlight()
	t.startLearnedInFlight()
	t.pace.gate = newFirstGate(t.pace.on, t.sync, t.costs.report != nil)
	t.joinStore(traits.Sharing)
	return t, nil
}

// validateRules refuses rules, the request's or a meter's, that the store cannot hold
// (cache.Traits.Validate; nil: it holds every strategy).
func (t *Transport) validateRules(v func(*engine.Strategy) error) error {
	if v == nil || t.strat == nil {
		return nil // no rules: each learned meter is checked when learned
	}
	if err := v(t.strat); err != nil {
		return optionErr("WithStore", err)
	}
	for _, m := range t.meters {
		if err := v(m.strat); err != nil {
			return optionErr(m.opt, fmt.Errorf("the store cannot hold the meter's rules: %w", err))
		}
	}
	return nil
}

// Close closes the store if New created it, and the degraded mode's memory store (Degrade),
// and stops renewing in-flight leases (WithInFlight), waiting for a renewal under way: slots
// still held then free at their leases' expiry, or when their bodies are closed.
// It does not close the base RoundTripper's idle connections. After Close, RoundTrip meets
// cache.ErrClosed and follows the StoreErrorPolicy: under SendUncounted requests are still sent,
// uncounted, and each error is reported; under SendNothing and Degrade nothing is sent.
func (t *Transport) Close() error {
	var err error
	if t.inflight != nil {
		t.inflight.close()
	}
	if l := t.learning(); l != nil && l.f != nil {
		l.f.close()
	}
	if t.fail.deg != nil {
		err = t.fail.deg.Close()
	}
	if t.share.own {
		err = errors.Join(t.store.Close(), err)
	}
	return err
}

// Rules returns the rules the Transport counts against.
func (t *Transport) Rules() []strategy.Rule {
	if t.strat == nil {
		return nil
	}
	return t.strat.Rules()
}

// Store returns the store counts live in (nil for the zero Transport).
func (t *Transport) Store() cache.Store { return t.store }

// RoundTrip counts the request under its key, then sends it through the base RoundTripper: at
// once in monitoring mode (the default); in pacing mode (WithPacing) once it has reserved a
// slot, or on a slot of the Reservation its context carries; with WithInFlight, once it holds
// an in-flight slot. It sends and records nothing, and closes the request body, when it returns
// a *DeadlineError (the wait would pass the context's deadline), the context's error (it ended
// while waiting, or while the store was contended), a *StoreError (the store failed, under
// SendNothing or Degrade), or an error naming a WithCost cost no rule can take.
// See docs/pacing.md#when-roundtrip-sends-nothing.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.strat == nil {
		if l := t.learning(); l != nil {
			return t.roundTripLearned(base, req, l)
		}
		return base.RoundTrip(req)
	}
	key := t.Key(req)
	if t.pace.gate != nil {
		return t.roundTripGated(base, req, key) // gate.go
	}
	if t.inflight != nil {
		return t.roundTripInFlight(base, req, key)
	}
	return t.roundTrip(base, req, key)
}

// roundTrip is RoundTrip once the request holds its in-flight slots, if any (inflight.go).
//
// The common path (no mark from a Transport further out, no Reservation, no WithCost,
// WithCostReport or meters, a store no other Transport uses) allocates nothing here: the
// charge lives on the stack unless WithCostReport keeps it past the send (kept), and the
// request goes to base as it is (marked).
func (t *Transport) roundTrip(base http.RoundTripper, req *http.Request, key string) (*http.Response, error) {
	ctx := req.Context()
	// Each lookup below walks the context's chain: only when it may find something (shared,
	// reserves).
	var mark *countMark
	if t.shared() {
		mark = markFrom(ctx)
	}
	lim, outer, om := t.uncounted(mark, key)
	if t.pace.reserves.Load() { // else no Reservation of t exists, and take spends only t's
		if r := reservationFrom(ctx); r != nil && r.take(t, key) {
			t.unreserveCounted(ctx, r, lim, outer)
			// The slot is one of the request's cost: a higher real cost is recorded on top;
			// none is given back (a spent slot never is).
			return t.sendMarked(base, req, t.marked(base, req, key, outer, true, 0, true, nil), key, t.slotCharge(lim))
		}
	}
	if lim.none() {
		// A Transport wrapping this one, over the same store, counted this attempt in every
		// counter this one keeps: counting it again would count it twice. The mark is passed
		// on: this attempt took it. Its charge can be corrected up here (outerCharge).
		return t.sendMarked(base, req, t.marked(base, req, key, outer, true, 0, true, nil), key, t.outerCharge(om, key))
	}
	if len(lim.meters) > 0 && t.costs.fixed == nil { // fixed: app keys, never ""
		if err := lim.checkKeys(key); err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
	}
	n, err := 1, error(nil) // every request costs 1 on each, without WithCost or Meter.Cost
	if !t.costs.unit {
		if n, lim, err = t.requestCost(req, key, lim); err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
		if lim.none() {
			// Counted further out on the key; no meter left here applies to req.
			return t.sendMarked(base, req, t.marked(base, req, key, outer, true, 0, false, nil), key, nil)
		}
	}
	// Set field by field: a composite literal here is built aside and copied in, and the copy's
	// wide loads of the narrow stores just made stall (store forwarding): a few ns a request.
	var ch charge
	ch.n, ch.lim, ch.gen = n, lim, t.gen()
	switch {
	case t.pace.on:
		// With no strat (the key counted further out) only the meters are reserved.
		ch.at, ch.local, err = t.acquire(ctx, key, n, t.fail.policy == SendUncounted, t.costs.report != nil, lim)
	default:
		err = t.record(ctx, key, n, lim)
	}
	if err != nil {
		var se *StoreError
		if !errors.As(err, &se) || t.fail.policy != SendUncounted {
			if se != nil {
				t.storeFailed(req, se.Key, se.Err)
			}
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
		t.storeFailed(req, se.Key, se.Err)
		// Not counted here: a Transport inside this one must count it (in every counter but
		// those counted further out).
		return t.sendMarked(base, req, t.marked(base, req, key, outer, false, 0, false, nil), key, nil)
	}
	return t.sendMarked(base, req, t.marked(base, req, key, outer, true, n, false, lim.meters), key, t.kept(&ch))
}

// record counts a request of cost n on key and each charge on the meters, and returns the first
// store error as a *StoreError naming the key it was on. Under SendUncounted all are tried,
// since the request is sent either way. Under SendNothing the meters go first, in order, and a
// failure stops there; the meters recorded before it, or before the request's key fails, keep
// a count for a request that was not sent (an over-count, never an under-count).
func (t *Transport) record(ctx context.Context, key string, n int, lim limits) error {
	if !t.share.contends {
		// No turns to take (recordTurn): the store's own error is the answer.
		err := t.recordAll(ctx, key, n, lim)
		if err != nil && ctx.Err() != nil {
			return gaveUp(ctx, err)
		}
		return err
	}
	leave, err := t.recordTurn(ctx, key)
	if err != nil {
		return err
	}
	err = t.recordAll(ctx, key, n, lim)
	leave()
	if err != nil && ctx.Err() != nil {
		return gaveUp(ctx, err) // the caller gave up: not the store's failure
	}
	return err
}

func (t *Transport) recordAll(ctx context.Context, key string, n int, lim limits) error {
	var first error
	for i := range lim.meters {
		c := &lim.meters[i] // not a copy: a request's path copies nothing it need not
		if err := t.recordOn(ctx, c.strat, c.key, c.n); err != nil {
			if first == nil {
				first = &StoreError{Key: c.key, Err: err}
			}
			if t.fail.policy != SendUncounted {
				return first
			}
		} else {
			t.recorded(c.key, c.n)
		}
	}
	if lim.strat != nil {
		if err := t.recordOn(ctx, lim.strat, key, n); err != nil {
			if first == nil {
				first = &StoreError{Key: key, Err: err}
			}
		} else {
			t.recorded(key, n)
		}
	}
	return first
}

// recorded reports n requests recorded on key to the observer, if any.
func (t *Transport) recorded(key string, n int) {
	if t.obs != nil {
		t.obs.Observe(observe.Event{Kind: observe.Recorded, Key: key, N: n})
	}
}

// reserved reports a reserve's answer to the observer, if any.
func (t *Transport) reserved(key string, n int, res engine.Result) {
	if t.obs == nil {
		return
	}
	if res.Allowed {
		t.obs.Observe(observe.Event{Kind: observe.Granted, Key: key, N: n})
	} else {
		t.obs.Observe(observe.Event{Kind: observe.Refused, Key: key, N: n, Wait: res.Wait})
	}
}

// waited reports to the observer, if any, a wait on key since start that ended now.
func (t *Transport) waited(key string, n int, start time.Time) {
	if t.obs == nil {
		return
	}
	if d := t.clock.Now().Sub(start); d > 0 {
		t.obs.Observe(observe.Event{Kind: observe.Waited, Key: key, N: n, Wait: d})
	}
}

// warnLevel returns Warn, with the number of warnings held back since the last one, when l
// allows a warning now (at most one a second), and Debug otherwise: a store that is down fails
// every request, and one line per request would flood the log.
func (t *Transport) warnLevel(l *lograte.Limiter) (slog.Level, int64) {
	if ok, n := l.Allow(time.Now()); ok {
		return slog.LevelWarn, n
	}
	return slog.LevelDebug, 0
}

func (t *Transport) storeFailed(req *http.Request, key string, err error) {
	action := "sent anyway (send uncounted); this request is not counted"
	switch t.fail.policy {
	case SendNothing:
		action = "not sent (send nothing)"
	case Degrade:
		action = "not sent (degrade: an error degraded mode does not cover)"
	}
	level, suppressed := t.warnLevel(&t.fail.storeWarn)
	t.logger.LogAttrs(req.Context(), level, "ratemonitor: store error",
		slog.String("key", key), slog.String("request", req.Method+" "+credential.URL(req.URL)),
		slog.String("action", action), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	if t.fail.onError != nil {
		t.fail.onError(req, key, err)
	}
}

// AllocationUsed returns, for each rule in order, how many requests recorded under key count
// now and how many remain. Errors come from the store (cache.ErrClosed, say). A meter's are
// Transport.Meter's, and in Status.
func (t *Transport) AllocationUsed(ctx context.Context, key string) ([]strategy.Usage, error) {
	if t.strat == nil {
		return nil, ErrNotConfigured
	}
	snap, err := t.ops.Peek(ctx, t.strat, key, 0)
	return snap.Usage, err
}

// WaitTime returns the smallest duration after which burst more requests under key fit in
// every rule, assuming nothing else is recorded meanwhile. It is 0 when they fit now. With
// meters (WithMeter, WithAppRules) it is the longest of the waits on key and on each meter's
// key, burst costing 1 each there; with WithSync it is
// at least the rest of a pause the upstream asked for.
// burst < 1 returns strategy.ErrInvalidBurst; a burst larger than a rule's effective limit
// (Limit − Headroom) returns an error wrapping strategy.ErrBurstTooLarge, since it can never
// fit. Store errors (cache.ErrClosed, say) are returned as they are.
func (t *Transport) WaitTime(ctx context.Context, key string, burst int) (time.Duration, error) {
	if t.strat == nil {
		return 0, ErrNotConfigured
	}
	if err := t.strat.CheckBurst(burst); err != nil {
		return 0, err
	}
	snap, err := t.ops.Peek(ctx, t.strat, key, burst)
	wait := snap.Wait
	for _, m := range t.meters {
		if err != nil {
			return wait, err
		}
		var d time.Duration
		d, err = t.meterWaitTime(ctx, m, key, burst)
		wait = max(wait, d)
	}
	return wait, err
}

// WaitSeconds is WaitTime in whole seconds, rounded up so that sleeping that long is never
// early. Errors are WaitTime's.
func (t *Transport) WaitSeconds(ctx context.Context, key string, burst int) (int, error) {
	d, err := t.WaitTime(ctx, key, burst)
	if err != nil {
		return 0, err
	}
	return int((d + time.Second - 1) / time.Second), nil
}

// Wait sleeps until a burst of burst requests under key fits in every rule, then returns nil;
// a ctx already done returns its error at once.
// It does not reserve the slots: another sender on the same key can take them between Wait and
// the send. When ctx has a deadline that the needed wait would pass, Wait returns at once with
// a *DeadlineError (wrapping context.DeadlineExceeded); when ctx is cancelled while waiting it returns
// ctx.Err() promptly. Burst errors are WaitTime's. It leaves no timer or goroutine behind.
func (t *Transport) Wait(ctx context.Context, key string, burst int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var start time.Time
	if t.obs != nil {
		start = t.clock.Now()
	}
	for {
		d, err := t.WaitTime(ctx, key, burst)
		if err != nil || d == 0 {
			if err == nil {
				t.waited(key, burst, start)
			}
			return err
		}
		if err := deadlineCheck(ctx, key, "", burst, d); err != nil {
			return err
		}
		if err := t.clock.Sleep(ctx, t.nap(d)); err != nil {
			return err
		}
	}
}

package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
)

// DefaultLeaseTTL is the lease of an in-flight slot unless WithInFlightLease says otherwise:
// a slot held by a process that crashed frees at most this long after its last renewal.
const DefaultLeaseTTL = 30 * time.Second

// InFlightPoll bounds how long a request waiting for an in-flight slot sleeps before it asks
// the store again, for slots freed by other processes (or other Transports of this one): a
// slot freed by this Transport wakes its waiter at once, and one whose lease expires is
// asked for at its expiry if that is sooner.
const InFlightPoll = 50 * time.Millisecond

// minLeaseTTL is the shortest lease WithInFlightLease takes: renewal runs every quarter of it,
// and a renewal round must end within half of it, so a lease shorter than a few store round
// trips (Redis: Options.Timeout, 100 ms by default) would expire under a slow round.
const minLeaseTTL = 100 * time.Millisecond

// inflightConfig is what the in-flight options asked for.
type inflightConfig struct {
	n, appN int           // WithInFlight, WithAppInFlight; 0: not given
	ttl     time.Duration // WithInFlightLease; 0: DefaultLeaseTTL
}

// WithInFlight lets at most n requests of one key be in flight at once (n ≥ 1): Xero's 5
// calls in progress per tenant, say (https://developer.xero.com/documentation/guides/oauth2/limits/#api-rate-limits).
// A request holds a slot of its key from just before it is sent until its response body is
// closed or read to EOF, or until the base RoundTripper returns an error or panics (the panic
// goes on up, the slot freed); a response without a
// body (nil or http.NoBody) frees its slot at once. So close every response body, as net/http
// asks: a body never closed holds its slot for as long as the process lives.
//
// Slots are counted in the store, so every process sharing it (Redis) shares the n: each slot
// is a lease with an expiry (cache.Leaser; WithInFlightLease), which this Transport renews
// while its request is in flight, so a process that crashes frees its slots within the TTL.
// New refuses a store that holds no leases: the memory and Redis stores do, the SQLite and
// DynamoDB stores do not.
//
// A request whose key has n in flight waits for a slot, under WithPacing and in monitoring
// mode alike (a concurrency limit is not a count that can be recorded after the fact: without
// the wait it would not limit anything), in the order of the per-key queue of pacing: by
// priority (WithPriority), first come first served within one, no waiter passed by more than
// MaxOvertakes later ones. A waiter holding an in-flight slot while it waits for a rate slot
// keeps it meanwhile, so a higher-priority request that arrives then waits for both. A slot this Transport frees wakes the next waiter at once; slots freed elsewhere are
// found by asking the store at least every InFlightPoll. The wait ends with the context's
// error when the context ends; under WithPacing, a wait for a slot while the key's rate
// limits already need a wait past the deadline fails at once with a *DeadlineError (the
// in-flight wait itself cannot be known in advance).
//
// Under WithPacing the in-flight slot is taken first and the rate slot after it: a rate slot
// counts from the instant it is recorded, so one held while waiting for an in-flight slot
// would count from before the send and free early upstream, costing 429s; an in-flight slot
// held while waiting for a rate slot costs nothing upstream, as the request is not sent
// meanwhile. Store errors follow the StoreErrorPolicy: under SendUncounted the request is sent without
// a slot (and reported), under SendNothing it is refused with a *StoreError, and under Degrade,
// while the shared store is unreachable, slots are counted in this process at its share of n
// (at least 1; see DegradedConfig.Share), the slots it still holds in the store counted
// against that share, and slots taken so are not known to the shared
// store when it returns. Transport.InFlight reports the slots held. Transports stacked over
// one store (one the base of the other, not through an *http.Transport) hold one slot of a key
// per request, the outermost's, however many of them have WithInFlight.
func WithInFlight(n int) Option {
	return func(t *Transport) error {
		if n < 1 {
			return fmt.Errorf("ratemonitor: WithInFlight(%d): want at least 1 request of one key in flight at once", n)
		}
		t.inflightCfg.n = n
		return nil
	}
}

// WithAppInFlight lets at most n requests be in flight at once on the app key of WithAppRules
// (n ≥ 1), across all keys, as WithInFlight does per key. New fails without WithAppRules.
// With both, a request takes its key's slot first and then the app key's.
func WithAppInFlight(n int) Option {
	return func(t *Transport) error {
		if n < 1 {
			return fmt.Errorf("ratemonitor: WithAppInFlight(%d): want at least 1 request in flight at once on the app key", n)
		}
		t.inflightCfg.appN = n
		return nil
	}
}

// WithInFlightLease sets the lease of an in-flight slot (default DefaultLeaseTTL, at least
// 100 ms): a slot held by a process that crashed frees at most ttl after its last renewal.
// While the process lives and reaches the store, a request never outlives its lease: the
// Transport renews every lease it holds each ttl/4 (one goroutine per Transport, only while
// it holds leases, stopped by Close), so a lease is at most ttl/2 old when it is renewed,
// provided a renewal round (one store round trip per lease due, one after another) takes less
// than ttl/4: keep ttl well above the store's round trip times the leases a Transport holds
// (1 s or more in production; short leases are for tests). A
// renewal that fails (the store unreachable for longer than ttl/2) is logged, and the slot
// may then free in the store while its request is still in flight. A renewal that finds its
// lease gone (expired meanwhile, or lost: a Redis restart, FLUSHALL or eviction) takes the
// slot again under a new lease when the key has room, and reports the loss either way
// (observe.StateLost, Op "lease", and a log line); when the key is full, because other
// processes took the freed slots meanwhile, it has more than n in flight until requests end
// (the renewal keeps trying to take the slot again, reporting it once). After Close nothing is
// renewed: slots still held then free at their leases' expiry. On a clock.Manual with Auto
// set (simulated time, for tests) nothing is renewed either.
func WithInFlightLease(ttl time.Duration) Option {
	return func(t *Transport) error {
		if ttl < minLeaseTTL {
			return fmt.Errorf("ratemonitor: WithInFlightLease(%v): want at least %v", ttl, minLeaseTTL)
		}
		t.inflightCfg.ttl = ttl
		return nil
	}
}

// checkInFlight refuses, in New, in-flight options that cannot work: before the default
// store is made (which holds leases), so that a failing New leaves nothing open.
func (t *Transport) checkInFlight() error {
	c := t.inflightCfg
	if c.n == 0 && c.appN == 0 {
		if c.ttl != 0 {
			return errors.New("ratemonitor: WithInFlightLease: without WithInFlight or WithAppInFlight there is nothing to lease: add one, or drop WithInFlightLease")
		}
		return nil
	}
	if c.appN > 0 && t.app == nil {
		return fmt.Errorf("ratemonitor: WithAppInFlight(%d) needs WithAppRules: it limits the app key's requests in flight", c.appN)
	}
	if t.store == nil {
		return nil // New makes a cache.Memory, which holds leases
	}
	if _, ok := t.store.(cache.Leaser); !ok {
		opt := fmt.Sprintf("WithInFlight(%d)", c.n)
		if c.n == 0 {
			opt = fmt.Sprintf("WithAppInFlight(%d)", c.appN)
		}
		return fmt.Errorf("ratemonitor: %s: the store (%s) holds no in-flight leases (cache.Leaser); use the memory store (cache.Memory) or the Redis store (redisstore)", opt, storeName(t.store))
	}
	return nil
}

// startInFlight builds the in-flight limiter once the store is known (checkInFlight passed).
func (t *Transport) startInFlight() {
	c := t.inflightCfg
	if c.n == 0 && c.appN == 0 {
		return
	}
	if c.ttl == 0 {
		c.ttl = DefaultLeaseTTL
	}
	f := &inflight{t: t, leaser: t.store.(cache.Leaser), cfg: c,
		held: map[string]int{}, local: map[string]int{}, leases: map[*slot]struct{}{}, wakers: map[string]*waker{}}
	if m, ok := t.clock.(*clock.Manual); ok && m.Auto {
		f.noRenew = true
	}
	f.stopCtx, f.stop = context.WithCancel(context.Background())
	t.inflight = f
}

// InFlight returns how many in-flight slots of key this Transport holds now: requests of key
// sent and not yet done (body not closed or read to EOF), with WithInFlight; for the app key
// of WithAppRules, those of every key, with WithAppInFlight. 0 without these options. Slots
// held by other Transports and processes sharing the store are not counted.
func (t *Transport) InFlight(key string) int {
	if t.inflight == nil {
		return 0
	}
	f := t.inflight
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[key]
}

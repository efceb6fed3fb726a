package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/degrade"
)

// defaultLeaseTTL is the lease of an in-flight slot unless WithInFlightLease says otherwise:
// a slot held by a process that crashed frees at most this long after its last renewal.
const defaultLeaseTTL = 30 * time.Second

// inFlightPoll bounds how long a request waiting for an in-flight slot sleeps before it asks
// the store again, for slots freed by other processes (or other Transports of this one): a
// slot freed by this Transport wakes its waiter at once, and one whose lease expires is
// asked for at its expiry if that is sooner.
const inFlightPoll = 50 * time.Millisecond

// minLeaseTTL is the shortest lease WithInFlightLease takes: renewal runs every quarter of it,
// and a renewal round must end within half of it, so a lease shorter than a few store round
// trips (Redis: Options.Timeout, 100 ms by default) would expire under a slow round.
const minLeaseTTL = 100 * time.Millisecond

// inflightConfig is what the in-flight options asked for.
type inflightConfig struct {
	n, appN int             // WithInFlight, WithAppInFlight; 0: not given
	meters  []inflightMeter // Meter.InFlight, in the order given
	ttl     time.Duration   // WithInFlightLease; 0: defaultLeaseTTL
}

// inflightMeter is a meter's cap on requests in progress, n on each of its keys.
type inflightMeter struct {
	*meter
	n int
}

// none reports whether no in-flight limit is kept.
func (c inflightConfig) none() bool { return c.n == 0 && c.appN == 0 && len(c.meters) == 0 }

// WithInFlight lets at most n requests of one key be in flight at once (n ≥ 1): Xero's 5
// calls in progress per tenant, say (https://developer.xero.com/documentation/guides/oauth2/limits/#api-rate-limits).
// A request holds a slot of its key from just before it is sent until its response body is
// closed or read to EOF, or until the base RoundTripper fails: so close every response body. A
// request whose key is full waits, paced or not, in the key's queue (by priority), until a slot
// frees or its context ends. Slots are leases in the store (cache.Leaser, WithInFlightLease),
// shared by every process that uses it; New refuses a store that holds none (the SQLite and
// DynamoDB stores). Transport.InFlight reports the slots held.
// See docs/pacing.md#limit-the-requests-in-flight.
func WithInFlight(n int) Option {
	return func(t *Transport) error {
		if n < 1 {
			return fmt.Errorf("ratemonitor: WithInFlight(%d): want at least 1 request of one key in flight at once", n)
		}
		t.setup.inflight.n = n
		return nil
	}
}

// WithAppInFlight lets at most n requests be in flight at once on the app meter's key (the first
// meter with an AppKey, as WithAppRules'), n ≥ 1, across all keys, as WithInFlight does per key.
// New fails without such a meter.
// With both, a request takes its key's slot first and then the app key's.
func WithAppInFlight(n int) Option {
	return func(t *Transport) error {
		if n < 1 {
			return fmt.Errorf("ratemonitor: WithAppInFlight(%d): want at least 1 request in flight at once on the app key", n)
		}
		t.setup.inflight.appN = n
		return nil
	}
}

// WithInFlightLease sets the lease of an in-flight slot (default 30 s, at least
// 100 ms): a slot held by a process that crashed frees at most ttl after its last renewal.
// The Transport renews the leases it holds every ttl/4, so keep ttl well above the store's
// round trip times the leases a Transport holds (1 s or more in production; short leases are
// for tests). A lease found gone (a Redis restart, FLUSHALL, an eviction) is taken again when
// the key has room, and reported as observe.StateLost (Op "lease"). After Close nothing is
// renewed. See docs/pacing.md#leases-in-the-store.
func WithInFlightLease(ttl time.Duration) Option {
	return func(t *Transport) error {
		if ttl < minLeaseTTL {
			return fmt.Errorf("ratemonitor: WithInFlightLease(%v): want at least %v", ttl, minLeaseTTL)
		}
		t.setup.inflight.ttl = ttl
		return nil
	}
}

// checkInFlight refuses, in New, in-flight options that cannot work: before the default
// store is made (which holds leases), so that a failing New leaves nothing open.
func (t *Transport) checkInFlight() error {
	c := t.setup.inflight
	if c.none() {
		if c.ttl != 0 {
			return errors.New("ratemonitor: WithInFlightLease: without WithInFlight, WithAppInFlight or a Meter with InFlight there is nothing to lease: add one, or drop WithInFlightLease")
		}
		return nil
	}
	if c.appN > 0 {
		am := t.appKeyMeter()
		if am == nil {
			return fmt.Errorf("ratemonitor: WithAppInFlight(%d) needs WithAppRules (or a Meter with an AppKey): it limits the app key's requests in flight, across every key", c.appN)
		}
		for _, f := range c.meters {
			if f.meter == am {
				return fmt.Errorf("ratemonitor: WithAppInFlight(%d): the app meter %q has InFlight %d already: give the cap once", c.appN, am.name, f.n)
			}
		}
	}
	if t.store == nil {
		return nil // New makes a cache.Memory, which holds leases
	}
	if _, ok := t.store.(cache.Leaser); !ok {
		opt := fmt.Sprintf("WithInFlight(%d)", c.n)
		switch {
		case c.n == 0 && c.appN > 0:
			opt = fmt.Sprintf("WithAppInFlight(%d)", c.appN)
		case c.n == 0:
			opt = c.meters[0].opt + ".InFlight"
		}
		return fmt.Errorf("ratemonitor: %s: the store (%s) holds no in-flight leases (cache.Leaser); use the memory store (cache.Memory) or the Redis store (redisstore)", opt, degrade.StoreName(t.store))
	}
	return nil
}

// startInFlight builds the in-flight limiter once the store is known (checkInFlight passed).
func (t *Transport) startInFlight() {
	c := t.setup.inflight
	if c.none() {
		return
	}
	if c.ttl == 0 {
		c.ttl = defaultLeaseTTL
	}
	if c.appN > 0 {
		// The app meter's cap, as a Meter.InFlight of its own, taken before the others'.
		c.meters = append([]inflightMeter{{meter: t.appKeyMeter(), n: c.appN}}, c.meters...)
		c.appN = 0
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

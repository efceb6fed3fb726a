package ratemonitor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Reservation is a burst of slots on one key, recorded in the store by Transport.Reserve and
// spent by the requests that carry it in their context. Slots not spent can be given back with
// Cancel. It is safe for concurrent use.
type Reservation struct {
	t   *Transport
	key string
	at  time.Time
	// meterAt holds the instant on each meter's key, in the Transport's order of meters.
	meterAt []time.Time
	n       int
	gen     uint64    // the degraded mode's generation before the slots were reserved (releaseIn)
	from    time.Time // on the Transport's clock, just before the slots were recorded
	until   time.Time // on the Transport's clock: from then on the slots no longer count

	mu    sync.Mutex
	left  int  // slots neither spent by a request nor given back
	stale bool // the clock was seen stepped back past from: the slots' end is unknown
}

// Reserve waits its turn on key and then until a burst of n fits in every rule (and on each
// meter's key, a slot costing 1 there), records the n requests, and returns the Reservation holding them.
// Requests sent with Reservation.Context spend the Reservation's slots instead of being
// recorded again. Waiters on a key are served by priority (Priority), then in the order they
// started waiting. Errors: strategy.ErrInvalidBurst, or one wrapping strategy.ErrBurstTooLarge,
// for a burst that can never fit; a *DeadlineError, at once, when the wait would pass the
// context's deadline; the context's error if it ends while waiting; a *StoreError when the
// store fails, whatever the StoreErrorPolicy. On error nothing is recorded.
// See docs/pacing.md#reserve-slots-ahead.
func (t *Transport) Reserve(ctx context.Context, key string, n int) (*Reservation, error) {
	if t.strat == nil {
		return nil, ErrNotConfigured
	}
	if err := t.strat.CheckBurst(n); err != nil {
		return nil, err
	}
	lim := t.freshLimits(key) // its charges are changed below
	if err := lim.checkKeys(key); err != nil {
		return nil, err
	}
	for i := range lim.meters {
		c := &lim.meters[i]
		if err := c.strat.CheckBurst(n); err != nil {
			return nil, fmt.Errorf("ratemonitor: meter %q, key %q: %w", c.m.name, c.key, err)
		}
		c.n = n // a slot costs 1 on every meter
	}
	t.pace.reserves.Store(true) // before any Reservation of t exists (RoundTrip reads it)
	gen := t.gen()
	at, local, err := t.acquire(ctx, key, n, false, true, lim)
	if err != nil {
		return nil, err
	}
	shortest := shortestWindow(t.strat)
	var meterAt []time.Time
	for _, c := range lim.meters {
		shortest = min(shortest, shortestWindow(c.strat))
		meterAt = append(meterAt, c.at)
	}
	return &Reservation{t: t, key: key, at: at, meterAt: meterAt, n: n, gen: gen, left: n, from: local, until: local.Add(shortest)}, nil
}

// shortestWindow returns the shortest effective window of s's rules.
func shortestWindow(s *engine.Strategy) time.Duration {
	shortest := s.Rule(0).EffectiveWindow()
	for i := range s.NumRules() {
		shortest = min(shortest, s.Rule(i).EffectiveWindow())
	}
	return shortest
}

type reservationContext struct{}

// Context returns a copy of ctx that makes the Transport spend this reservation's slots on the
// requests that carry it, one per attempt, as long as the request's key is the reservation's.
// When they are spent, further requests are counted as usual, and so are requests sent once the
// slots have stopped counting (the shortest rule's window, margin included, after they were
// reserved). A slot counts from its reservation, not from the send: send promptly.
func (r *Reservation) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, reservationContext{}, r)
}

func reservationFrom(ctx context.Context) *Reservation {
	r, _ := ctx.Value(reservationContext{}).(*Reservation)
	return r
}

// take spends one slot for a request of t on key, if the reservation has one for it that still
// counts.
//
// A clock seen stepped back past the reservation's start by more than StepTolerance (a wall
// clock, as the SQLite store's) makes the reservation stale for good: the store rebases the
// key's records on the new clock, so they stop counting on time, while until, read on the new
// clock, would let the slots be spent for as long as the step; a request on a stale
// reservation is counted as usual (an over-count at worst, never one sent uncounted).
func (r *Reservation) take(t *Transport, key string) bool {
	if r.t != t || r.key != key {
		return false
	}
	now := t.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.from.Add(-engine.StepTolerance)) {
		r.stale = true
	}
	if r.stale || r.left == 0 || !now.Before(r.until) {
		return false
	}
	r.left--
	return true
}

// Remaining returns the slots neither spent nor given back.
func (r *Reservation) Remaining() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.left
}

// Cancel gives back the slots that no request has spent, in the spirit of x/time/rate's
// Reservation.Cancel. A slot spent by a request is never given back, whatever the response —
// an error, a 429, a timeout — because the upstream counts every attempt that reaches it.
// Cancel is safe to call more than once; only the first returns slots. After a clock step back
// beyond engine.StepTolerance since the reservation (a wall clock), nothing is given back:
// the slots are held until they expire. If the store fails, the
// slots stay reserved and the store's error is returned, so Cancel can be tried again.
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.t.clock.Now().Before(r.from.Add(-engine.StepTolerance)) {
		r.stale = true
	}
	if r.stale {
		// The key was rebased on a clock stepped back: r.at no longer names the slots'
		// instant, and a release there could take back newer requests. The slots are held
		// until they expire.
		r.left = 0
	}
	if r.left == 0 {
		return nil
	}
	if err := r.t.releaseIn(ctx, r.gen, r.t.strat, r.key, r.at, r.left); err != nil {
		return err
	}
	for i, m := range r.t.meters {
		// The key's slots are back; a failure here leaves only the meters' held until they
		// expire.
		mk := m.keyFor(r.key)
		if err := r.t.releaseIn(ctx, r.gen, m.strat, mk, r.meterAt[i], r.left); err != nil {
			r.left = 0
			return fmt.Errorf("ratemonitor: the slots on key %q were given back, but not those on meter %q, key %q: %w", r.key, m.name, mk, err)
		}
	}
	r.left = 0
	return nil
}

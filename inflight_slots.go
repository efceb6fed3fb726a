package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/degrade"
	"github.com/ratemonitor/ratemonitor/observe"
)

// inflight holds a Transport's in-flight slots (WithInFlight, WithAppInFlight).
type inflight struct {
	t       *Transport
	leaser  cache.Leaser
	cfg     inflightConfig
	noRenew bool // a simulated clock (clock.Manual with Auto): a renewal loop would spin

	mu       sync.Mutex
	held     map[string]int     // key → slots held by this Transport (store and local)
	local    map[string]int     // key → slots counted here while the shared store is out (Degrade)
	leases   map[*slot]struct{} // the store leases held, for renewal
	wakers   map[string]*waker  // queue → its head's sleep, woken when a slot of its key frees
	releases uint64             // slots freed so far: a waiter that saw a full key sleeps only if none freed since
	renewing bool               // the renewal goroutine runs
	closed   bool
	stopCtx  context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// slot is one in-flight slot held.
type slot struct {
	key     string
	queue   string    // the pacer queue of its waiters
	id      string    // the store lease; "" for a slot counted locally (Degrade); under mu
	limit   int       // the n it was taken under, to take it again if the store lost it
	lost    bool      // its lease was lost and not taken again, reported once; under mu
	renewed time.Time // when the lease was taken or last renewed (Transport's clock)
}

type waker struct{ wake context.CancelFunc }

// Queue prefixes of in-flight waiters in the pacer, apart from the rate queues.
const (
	inflightQueue      = "\x00inflight\x00"
	meterInflightQueue = "\x00meterinflight\x00" // then the meter's name, and its key
)

// roundTripInFlight is RoundTrip with in-flight slots: taken before the rate slot, held until
// the response body is done.
func (t *Transport) roundTripInFlight(base http.RoundTripper, req *http.Request, key string) (*http.Response, error) {
	// The passes taken in the in-flight queues count in the rate queues too (maxOvertakes).
	req = req.WithContext(withPasses(req.Context()))
	h, err := t.inflight.take(req, key)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	// A panic in base (a bug in a wrapped RoundTripper, recovered further up as net/http's
	// server does) would otherwise keep the slots, renewed, for as long as the process lives.
	sent := false
	mreq, m := h.markHeld(base, req)
	defer func() {
		if m != nil {
			m.done.Store(true) // the call to base is over: the mark is void (inflightMark)
		}
		if !sent {
			h.release()
		}
	}()
	resp, err := t.roundTrip(base, mreq, key)
	sent = true
	if err != nil || resp == nil {
		h.release()
		return resp, err
	}
	return h.attach(resp), nil
}

// take takes key's slot and then each in-flight meter's (the app meter's first), as
// configured. A store error under SendUncounted is reported and the request goes on without
// that slot.
func (f *inflight) take(req *http.Request, key string) (*held, error) {
	ctx := req.Context()
	h := &held{f: f}
	type want struct {
		key, queue string
		n          int
	}
	var wants []want
	if f.cfg.n > 0 {
		wants = append(wants, want{key, inflightQueue + key, f.cfg.n})
	}
	for _, m := range f.cfg.meters {
		if m.cost != nil {
			n, err := callCost("meter", m.name, m.cost, req)
			if err != nil {
				h.release()
				return nil, err
			}
			if n == 0 {
				continue // the meter does not apply to req
			}
		}
		mk := m.keyFor(key)
		if mk == "" {
			h.release()
			return nil, meterKeyErr(m.meter, key)
		}
		wants = append(wants, want{mk, meterInflightQueue + m.name + "\x00" + mk, m.n})
	}
	check := func() error { return f.t.rateDeadline(ctx, key) }
	for _, w := range wants {
		if heldOutside(ctx, f.t, w.key) {
			continue // a Transport wrapping this one holds it (inflight_stack.go)
		}
		s, err := f.takeOne(ctx, w.key, w.queue, w.n, check)
		var se *StoreError
		if errors.As(err, &se) {
			f.t.storeFailed(req, se.Key, se.Err) // logged and handed to WithErrorHandler, as RoundTrip does
			if f.t.fail.policy == SendUncounted {
				continue
			}
		}
		if err != nil {
			h.release()
			return nil, err
		}
		h.slots = append(h.slots, s)
	}
	return h, nil
}

// rateDeadline returns a *DeadlineError when a paced request on key would have to wait for its
// rate slot past ctx's deadline: then waiting for an in-flight slot first is pointless.
func (t *Transport) rateDeadline(ctx context.Context, key string) error {
	if _, ok := ctx.Deadline(); !ok || !t.pace.on {
		return nil
	}
	snap, err := t.ops.Peek(ctx, t.strat, key, 1)
	if err != nil {
		return nil // the rate reserve will meet the store's state
	}
	_, err = t.waitAll(ctx, key, 1, snap.Wait, "", t.allLimits(key).meters)
	return err
}

// takeOne waits for a slot of key under limit n, in queue's order.
func (f *inflight) takeOne(ctx context.Context, key, queue string, n int, check func() error) (*slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.t.queued(queue) == 0 {
		if s, _, err := f.try(ctx, key, queue, n); s != nil || err != nil {
			return s, err
		}
	}
	leave, err := f.t.join(ctx, queue, 1, func(int) error { return check() })
	if err != nil {
		return nil, err
	}
	defer leave()
	for {
		f.mu.Lock()
		seen := f.releases
		f.mu.Unlock()
		s, wait, err := f.try(ctx, key, queue, n)
		if s != nil || err != nil {
			return s, err
		}
		if err := check(); err != nil {
			return nil, err
		}
		if err := f.sleep(ctx, queue, seen, min(wait, inFlightPoll)); err != nil {
			return nil, err
		}
	}
}

// try asks for a slot once. It returns the slot, or how long until the earliest lease of key
// expires, or an error: the context's, or a *StoreError.
func (f *inflight) try(ctx context.Context, key, queue string, n int) (*slot, time.Duration, error) {
	if f.t.fail.deg != nil && f.t.fail.deg.IsDegraded() {
		return f.tryLocal(key, queue, n)
	}
	l, err := f.leaser.AcquireLease(ctx, key, n, f.cfg.ttl)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, gaveUp(ctx, err)
		}
		if f.t.fail.deg != nil && degrade.IsOutage(ctx, err) {
			return f.tryLocal(key, queue, n)
		}
		return nil, 0, &StoreError{Key: key, Err: err}
	}
	if !l.Acquired() {
		return nil, l.Wait, nil
	}
	s := &slot{key: key, queue: queue, id: l.ID, limit: n, renewed: f.t.clock.Now()}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[key]++
	f.leases[s] = struct{}{}
	if !f.renewing && !f.closed && !f.noRenew {
		f.renewing = true
		f.wg.Add(1)
		go f.renewLoop()
	}
	return s, 0, nil
}

// tryLocal counts a slot in this process while the shared store is out, at this process's
// share of n (at least 1). The share bounds every slot of key this Transport holds, the ones
// still leased in the store before it went out included: those requests are still in flight
// upstream, so counting only the slots taken while degraded would let share·n more go.
func (f *inflight) tryLocal(key, queue string, n int) (*slot, time.Duration, error) {
	limit := max(1, int(float64(n)*f.t.fail.deg.EpisodeShare()))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[key] >= limit {
		return nil, inFlightPoll, nil
	}
	f.local[key]++
	f.held[key]++
	return &slot{key: key, queue: queue}, 0, nil
}

// sleep waits up to d for a slot of queue's key to free in this Transport; at once when one
// freed since seen. It returns only the context's error.
func (f *inflight) sleep(ctx context.Context, queue string, seen uint64, d time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &waker{wake: cancel}
	f.mu.Lock()
	if f.releases != seen {
		f.mu.Unlock()
		return nil
	}
	f.wakers[queue] = w
	f.mu.Unlock()
	f.t.clock.Sleep(wctx, d)
	f.mu.Lock()
	if f.wakers[queue] == w {
		delete(f.wakers, queue)
	}
	f.mu.Unlock()
	return ctx.Err()
}

// release frees s: in the store first, then here, waking the head of its queue.
func (f *inflight) release(s *slot) {
	f.mu.Lock()
	delete(f.leases, s) // no renewal from now on
	id := s.id
	f.mu.Unlock()
	if id != "" {
		if err := f.leaser.ReleaseLease(context.Background(), s.key, id); err != nil {
			// The lease is not renewed any more: it frees at its expiry.
			f.t.logger.LogAttrs(context.Background(), slog.LevelDebug, "ratemonitor: in-flight slot not released; it frees when its lease expires",
				slog.String("key", s.key), slog.Any("error", err))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if id == "" {
		if f.local[s.key]--; f.local[s.key] <= 0 {
			delete(f.local, s.key)
		}
	}
	if f.held[s.key]--; f.held[s.key] <= 0 {
		delete(f.held, s.key)
	}
	f.releases++
	if w := f.wakers[s.queue]; w != nil {
		w.wake()
	}
}

// renewLoop renews, every ttl/4, the leases at least ttl/4 old, until none is held or Close.
func (f *inflight) renewLoop() {
	defer f.wg.Done()
	every := f.cfg.ttl / 4
	for {
		if f.t.clock.Sleep(f.stopCtx, every) != nil {
			return
		}
		f.mu.Lock()
		if len(f.leases) == 0 {
			f.renewing = false
			f.mu.Unlock()
			return
		}
		now := f.t.clock.Now()
		var due []*slot
		for s := range f.leases {
			if now.Sub(s.renewed) >= every {
				due = append(due, s)
			}
		}
		f.mu.Unlock()
		for _, s := range due {
			f.mu.Lock()
			id := s.id
			f.mu.Unlock()
			ok, err := f.leaser.RenewLease(f.stopCtx, s.key, id, f.cfg.ttl)
			if err == nil && !ok {
				ok, err = f.restore(s)
				if f.stopCtx.Err() != nil {
					return
				}
				if err == nil && !ok {
					continue // reported by restore
				}
			}
			f.mu.Lock()
			_, still := f.leases[s]
			if ok && err == nil {
				s.renewed = now
			}
			f.mu.Unlock()
			if f.stopCtx.Err() != nil {
				return
			}
			if still && err != nil {
				level, suppressed := f.t.warnLevel(&f.t.fail.storeWarn)
				f.t.logger.LogAttrs(context.Background(), level, "ratemonitor: in-flight lease not renewed; its slot may free while the request is in flight",
					slog.String("key", s.key), slog.String("reason", err.Error()), slog.Int64("suppressed", suppressed))
			}
		}
	}
}

// restore takes again, under a new lease, the slot of s whose lease the store no longer holds
// though its request is still in flight: the store lost it (a Redis restart, FLUSHALL or
// eviction) or it expired (the store unreachable for longer than the TTL). It reports whether
// the slot is held again. Either way the loss is reported (observe.StateLost, Op "lease") and
// logged: until it was restored another process could take the slot, and when the key is full
// (others took the freed slots) it cannot be, and the key has more than n in flight until
// requests end.
func (f *inflight) restore(s *slot) (bool, error) {
	l, err := f.leaser.AcquireLease(f.stopCtx, s.key, s.limit, f.cfg.ttl)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	_, still := f.leases[s]
	if still && l.Acquired() {
		s.id = l.ID
	}
	reported := s.lost
	s.lost = still && !l.Acquired()
	f.mu.Unlock()
	if !still {
		if l.Acquired() { // released meanwhile: give back the lease just taken
			_ = f.leaser.ReleaseLease(context.Background(), s.key, l.ID)
		}
		return true, nil
	}
	what := "the store no longer held the lease of a request still in flight (a restart, a flush or an eviction lost it, or it expired while the store was unreachable)"
	msg := "ratemonitor: in-flight lease lost and taken again"
	if l.Acquired() {
		what += "; it was taken again"
	} else {
		what += fmt.Sprintf(", and the key's %d slots are all taken again: more than the limit are in flight until requests end", s.limit)
		msg = "ratemonitor: in-flight lease lost and not restored; its key may have more requests in flight than its limit"
	}
	if reported {
		return l.Acquired(), nil // still lost (tried again each round): reported already
	}
	if f.t.obs != nil {
		f.t.obs.Observe(observe.Event{Kind: observe.StateLost, Store: degrade.StoreName(f.t.store), Op: "lease", Key: s.key, Err: errors.New(what)})
	}
	level, suppressed := f.t.warnLevel(&f.t.fail.storeWarn)
	f.t.logger.LogAttrs(context.Background(), level, msg,
		slog.String("key", s.key), slog.Int("held", l.Held), slog.Int("limit", s.limit), slog.Int64("suppressed", suppressed))
	return l.Acquired(), nil
}

// close stops the renewal goroutine and waits for it.
func (f *inflight) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.stop()
	f.wg.Wait()
}

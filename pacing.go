package ratemonitor

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// WithPacing makes RoundTrip wait for a free slot before each attempt instead of only recording
// it: the attempt is reserved in the store (check and record in one atomic step, so concurrent
// senders never overshoot a rule), waiting as long as needed. See Transport.RoundTrip for how
// the request's context bounds the wait, and Transport.Reserve for fairness. A paced Transport's
// StoreErrorPolicy is Degrade unless WithStoreErrorPolicy says otherwise.
func WithPacing() Option {
	return func(t *Transport) error {
		t.pacing = true
		return nil
	}
}

// pacer queues the requests waiting for a slot, per key, in arrival order.
type pacer struct {
	seed   maphash.Seed
	shards [32]pacerShard
	// nq is the number of queues over all shards (each shard's nq, summed), read by queued
	// first: when nobody waits on any key, a paced request does not even hash its key.
	nq atomic.Int32
}

type pacerShard struct {
	mu     sync.Mutex
	queues map[string]*queue
	// nq is len(queues), written under mu, read without it by queued: a paced request on a key
	// nobody waits on (the common case) then takes no lock.
	nq atomic.Int32
}

// queue is one key's waiters, in arrival order; the head, one of them, is the only one that
// asks the store. Without priorities the head is always waiters[0].
type queue struct {
	waiters []*waiter
	head    *waiter // nil only when waiters is empty
}

type waiter struct {
	n         int
	prio      Priority      // from the caller's context (WithPriority)
	overtaken int           // waiters that arrived later and got the turn first (MaxOvertakes)
	turn      chan struct{} // closed when the waiter becomes the head
}

// handOn gives the turn to the waiter pick chooses, counting it as passing every older waiter.
// q.head must have left.
func (q *queue) handOn() {
	q.head = nil
	if len(q.waiters) == 0 {
		return
	}
	i := pick(q.waiters)
	for _, o := range q.waiters[:i] {
		o.overtaken++
	}
	q.head = q.waiters[i]
	close(q.head.turn)
}

func (p *pacer) shard(key string) *pacerShard {
	return &p.shards[maphash.String(p.seed, key)%uint64(len(p.shards))]
}

// Queued returns how many requests and reservations are waiting for a slot on key in this
// Transport (pacing mode and Reserve), and, with WithInFlight, requests waiting for one of
// key's in-flight slots (a request waits for one slot at a time, so none is counted twice); 0
// when none are. Waiters at the app key of WithAppRules are not counted.
func (t *Transport) Queued(key string) int {
	return t.queued(key) + t.queued(inflightQueue+key)
}

// queued returns the length of the pacer queue qkey (a key's, or one named by a queue prefix).
func (t *Transport) queued(qkey string) int {
	key := qkey
	if t.pacer.nq.Load() == 0 {
		return 0
	}
	sh := t.pacer.shard(key)
	if sh.nq.Load() == 0 {
		return 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := sh.queues[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// acquire reserves a burst of n on key and, with a meter (WithMeter, WithAppRules), of appN on
// the meter's key, waiting its turn in key's queue and then until both have room at the same
// moment. It returns the instants the burst was recorded at, on key and on the meter's key, and the Transport's clock just before the
// store was asked for them (no later than the store's own instant).
//
// A store error comes back as a *StoreError; a context that ends first comes back as its error,
// and a wait that would pass its deadline, at once, as a *DeadlineError. On error nothing stays
// recorded, except the key's slots when the app key's store call failed and keepOnStoreError is
// set (the request is then sent anyway, under SendUncounted). local is read only when
// wantLocal is set (a clock read per reserve that a paced RoundTrip without WithCostReport does
// not need), and is zero otherwise.
func (t *Transport) acquire(ctx context.Context, key string, n, appN int, keepOnStoreError, wantLocal bool, lim limits) (at, appAt, local time.Time, err error) {
	if t.obs == nil {
		return t.acquireSlots(ctx, key, n, appN, keepOnStoreError, wantLocal, lim)
	}
	start := t.clock.Now()
	at, appAt, local, err = t.acquireSlots(ctx, key, n, appN, keepOnStoreError, wantLocal, lim)
	if err == nil {
		t.waited(key, n, start)
	}
	return at, appAt, local, err
}

// acquireSlots is acquire without the observer's Waited event.
func (t *Transport) acquireSlots(ctx context.Context, key string, n, appN int, keepOnStoreError, wantLocal bool, lim limits) (at, appAt, local time.Time, err error) {
	if err := ctx.Err(); err != nil {
		return at, appAt, local, err
	}
	// reserve asks the store once for both keys. The key's slots are never held while waiting
	// for the app key's: a slot is counted from the instant it is recorded, so one held for a
	// while before the send would free early by as much. A refusal whose wait would pass the
	// deadline is an error; the wait reported is the longer of the two keys'.
	keyFull := false // the last reserve was refused by key itself, not by the app key
	reserve := func() (time.Duration, error) {
		if wantLocal {
			local = t.clock.Now()
		}
		gen := t.gen() // before the reserve: a switch since then keeps the slots (releaseIn)
		res, err := t.reserveOn(ctx, lim.strat, key, n)
		keyFull = err == nil && !res.Allowed
		if err == nil && t.obs != nil { // checked here too: reserved is not inlined
			t.reserved(key, n, res)
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0, gaveUp(ctx, err) // the caller gave up: not the store's failure
			}
			if lim.app != nil && keepOnStoreError {
				// The request goes anyway (SendUncounted): the app key still counts it.
				t.recordOn(ctx, lim.app.strat, lim.appKey, appN)
			}
			return 0, &StoreError{Key: key, Err: err}
		}
		wait := res.Wait
		if lim.app != nil {
			if res.Allowed {
				ares, err := t.reserveOn(ctx, lim.app.strat, lim.appKey, appN)
				if err == nil && t.obs != nil {
					t.reserved(lim.appKey, appN, ares)
				}
				var se *StoreError
				if err != nil && ctx.Err() == nil {
					se = &StoreError{Key: lim.appKey, Err: err}
				} else if err != nil {
					// The caller gave up: give the key's slots back and say so.
					t.releaseIn(context.WithoutCancel(ctx), gen, lim.strat, key, res.At, n)
					return 0, gaveUp(ctx, err)
				}
				if err == nil && ares.Allowed {
					at, appAt = res.At, ares.At
					return 0, nil
				}
				if se == nil || !keepOnStoreError {
					// Give the key's slots back, even if ctx has ended: they were never used.
					t.releaseIn(context.WithoutCancel(ctx), gen, lim.strat, key, res.At, n)
				}
				if se != nil {
					at = res.At
					return 0, se
				}
				wait = ares.Wait
			} else if snap, err := t.ops.Peek(ctx, lim.app.strat, lim.appKey, appN); err == nil {
				wait = max(wait, snap.Wait)
			}
		} else if res.Allowed {
			at = res.At
			return 0, nil
		}
		return wait, deadlineCheck(ctx, key, n, wait)
	}
	// Nobody waits on this key: try at once, without queueing. Not over a store that contends:
	// callers arriving together would race for the key's item there, so every caller takes the
	// key's turn. Not with app rules either: there a reserve holds the key's slot for a moment
	// while it asks the app key, and a caller arriving together, refused by that slot, would be
	// told to wait a whole window for it.
	if !t.contends && lim.app == nil && t.queued(key) == 0 {
		if wait, err := reserve(); err != nil || wait == 0 {
			return at, appAt, local, err
		}
	}
	// MaxOvertakes across the key's queue and the app key's: only the queues read it, so a
	// request served at once above needs none (a context and its value, two allocations).
	ctx = withPasses(ctx)
	leaveKey, err := t.join(ctx, key, n, func(ahead int) error { return t.queueDeadlineCheck(ctx, key, n, appN, ahead, lim) })
	if err != nil {
		return at, appAt, local, err
	}
	defer leaveKey()
	for {
		leaveApp := func() {}
		if lim.app != nil {
			// Wait for room on key first, holding only key's turn: a key at its limit or paused
			// must not hold up the other keys at the app key meanwhile.
			if err := t.waitKey(ctx, key, n, appN, lim); err != nil {
				return at, appAt, local, err
			}
			// Then wait for a turn at the app key: bursts and single requests of every key of
			// this Transport are served there in order, so none starves.
			leaveApp, err = t.join(ctx, appQueue+lim.appKey, appN, func(ahead int) error {
				snap, err := t.ops.Peek(ctx, lim.app.strat, lim.appKey, min(appN+ahead, lim.app.strat.MaxBurst()))
				if err != nil {
					return nil
				}
				return deadlineCheck(ctx, key, n, snap.Wait)
			})
			if err != nil {
				return at, appAt, local, err
			}
		}
		for {
			wait, err := reserve()
			if err != nil || wait == 0 {
				leaveApp()
				return at, appAt, local, err
			}
			if lim.app != nil && keyFull {
				break // key is full again (a pause, another process): give up the app turn
			}
			if err := t.clock.Sleep(ctx, t.nap(wait)); err != nil {
				leaveApp()
				return at, appAt, local, err
			}
		}
		leaveApp()
	}
}

// waitKey sleeps until a burst of n fits on key alone, or returns a *DeadlineError at once
// when that wait, or the app key's, would pass ctx's deadline.
func (t *Transport) waitKey(ctx context.Context, key string, n, appN int, lim limits) error {
	for {
		snap, err := t.ops.Peek(ctx, lim.strat, key, n)
		if err != nil || snap.Wait == 0 {
			return nil // the store's error, if any, comes from the reserve that follows
		}
		wait := snap.Wait
		if app, err := t.ops.Peek(ctx, lim.app.strat, lim.appKey, appN); err == nil {
			wait = max(wait, app.Wait)
		}
		if err := deadlineCheck(ctx, key, n, wait); err != nil {
			return err
		}
		if err := t.clock.Sleep(ctx, t.nap(snap.Wait)); err != nil {
			return err
		}
	}
}

// appQueue prefixes the app key's queue in the pacer, so that it never shares a queue with a
// request key of the same name.
const appQueue = "\x00app\x00"

// join queues a waiter for n on queue qkey, at ctx's priority, and waits for its turn. When
// others are ahead and ctx has a deadline, check is called first with the requests held by
// the waiters that would get their turn before this one (servedBefore), to refuse at once a
// wait that cannot end before the deadline. The returned func takes the waiter out and hands
// the turn on; it must be called once the waiter is done, and is already called when join
// fails.
func (t *Transport) join(ctx context.Context, qkey string, n int, check func(ahead int) error) (func(), error) {
	sh := t.pacer.shard(qkey)
	sh.mu.Lock()
	q := sh.queues[qkey]
	if q == nil {
		if sh.queues == nil {
			sh.queues = map[string]*queue{}
		}
		q = &queue{}
		sh.queues[qkey] = q
		sh.nq.Add(1)
		t.pacer.nq.Add(1)
	}
	carried := passesFrom(ctx)
	w := &waiter{n: n, prio: PriorityFrom(ctx), turn: make(chan struct{})}
	if carried != nil {
		w.overtaken = int(carried.n.Load()) // passes taken in the request's earlier queue (priority.go)
	}
	q.waiters = append(q.waiters, w)
	first := q.head == nil
	ahead := 0
	if first {
		q.head = w
		close(w.turn)
	} else if _, ok := ctx.Deadline(); ok {
		ahead = servedBefore(q.waiters, q.head, w)
	}
	sh.mu.Unlock()
	leave := func() { t.leave(sh, qkey, q, w) }
	if !first {
		if ahead > 0 {
			if err := check(ahead); err != nil {
				leave()
				return nil, err
			}
		}
		select {
		case <-w.turn:
		case <-ctx.Done():
			leave()
			return nil, ctx.Err()
		}
		if carried != nil {
			sh.mu.Lock() // the head is passed no more: its count is final
			carried.n.Store(int64(w.overtaken))
			sh.mu.Unlock()
		}
	}
	return leave, nil
}

// leave takes w out of its queue and, when it had the turn, hands the turn on.
func (t *Transport) leave(sh *pacerShard, key string, q *queue, w *waiter) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i, o := range q.waiters {
		if o == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if q.head == w {
				q.handOn()
			}
			break
		}
	}
	if len(q.waiters) == 0 && sh.queues[key] == q {
		delete(sh.queues, key)
		sh.nq.Add(-1)
		t.pacer.nq.Add(-1)
	}
}

// queueDeadlineCheck refuses at once a waiter that cannot get its turn before ctx's deadline:
// the requests ahead of it and its own must all fit, which takes at least the wait for their
// sum, or, when the sum is more than can ever go at once (MaxBurst), the wait for one plus
// the least time the sum takes to go one after another (minSpan).
func (t *Transport) queueDeadlineCheck(ctx context.Context, key string, n, appN, ahead int, lim limits) error {
	if _, ok := ctx.Deadline(); !ok {
		return nil
	}
	k := n + ahead
	m := min(k, lim.strat.MaxBurst())
	snap, err := t.ops.Peek(ctx, lim.strat, key, m)
	if err != nil {
		return nil // the head's own reserve will report the store's state
	}
	wait := snap.Wait
	if k > m {
		// More than can ever go at once: the first goes no sooner than Peek(1) says, the
		// last at least minSpan after it (pacing_bound.go).
		if first, err := t.ops.Peek(ctx, lim.strat, key, 1); err == nil {
			wait = max(wait, first.Wait+minSpan(lim.strat, k))
		}
	}
	if lim.app != nil {
		// The app key must have room for this burst too, whatever other keys take meanwhile.
		if app, err := t.ops.Peek(ctx, lim.app.strat, lim.appKey, appN); err == nil {
			wait = max(wait, app.Wait)
		}
	}
	return deadlineCheck(ctx, key, n, wait)
}

// deadlineCheck returns a *DeadlineError when waiting d would pass ctx's deadline.
func deadlineCheck(ctx context.Context, key string, n int, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return &DeadlineError{Key: key, N: n, Wait: d}
	}
	return nil
}

// DeadlineError is returned, at once, when n requests on a key would have to wait past the
// context's deadline: by a paced RoundTrip, Reserve and Wait. Nothing was sent or recorded. It
// wraps context.DeadlineExceeded, so errors.Is(err, context.DeadlineExceeded) holds.
type DeadlineError struct {
	Key  string        // the key waited on
	N    int           // the requests asked for
	Wait time.Duration // the least wait they needed, from when it was checked
}

// Error says how long the wait would have been.
func (e *DeadlineError) Error() string {
	w := e.Wait
	if w >= time.Millisecond {
		w = w.Round(time.Millisecond)
	}
	return fmt.Sprintf("ratemonitor: %d request(s) on key %q need a wait of %v, past the context's deadline", e.N, e.Key, w)
}

// Unwrap returns context.DeadlineExceeded.
func (e *DeadlineError) Unwrap() error { return context.DeadlineExceeded }

package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// WithPacing makes RoundTrip wait for a free slot before each attempt instead of only recording
// it: the attempt is reserved in the store (check and record in one atomic step, so concurrent
// senders never overshoot a rule), waiting as long as needed. See Transport.RoundTrip for how
// the request's context bounds the wait, and Transport.Reserve for fairness.
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
}

type pacerShard struct {
	mu     sync.Mutex
	queues map[string]*queue
}

// queue is one key's waiters; waiters[0] is the head, the only one that asks the store.
type queue struct {
	waiters []*waiter
}

type waiter struct {
	n    int
	turn chan struct{} // closed when the waiter becomes the head
}

func (p *pacer) shard(key string) *pacerShard {
	return &p.shards[maphash.String(p.seed, key)%uint64(len(p.shards))]
}

// Queued returns how many requests and reservations are waiting for a slot on key in this
// Transport (pacing mode and Reserve); 0 when none are.
func (t *Transport) Queued(key string) int {
	sh := t.pacer.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := sh.queues[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// acquire reserves a burst of n on key and then, with WithAppRules, on the app key, waiting
// for each. A store error comes back as a *StoreError; a context that ends first, or a wait that
// would pass its deadline, comes back as the context's error. On error nothing stays recorded,
// except the key's slots when the app key's store call failed and keepOnStoreError is set (the
// request is then sent anyway, under FailOpen). It returns the instants the burst was recorded
// at, on key and on the app key.
func (t *Transport) acquire(ctx context.Context, key string, n int, keepOnStoreError bool) (at, appAt time.Time, err error) {
	res, err := t.acquireOn(ctx, t.strat, key, key, n)
	if err != nil || t.app == nil {
		return res.At, time.Time{}, err
	}
	ares, err := t.acquireOn(ctx, t.app.strat, t.app.key, appQueue+t.app.key, n)
	if err != nil {
		var se *StoreError
		if !keepOnStoreError || !errors.As(err, &se) {
			// The key's slots were never used: give them back, even if ctx has ended.
			t.store.Release(context.WithoutCancel(ctx), t.strat, key, res.At, n)
		}
		return res.At, time.Time{}, err
	}
	return res.At, ares.At, nil
}

// appQueue prefixes the app key's queue in the pacer, so that it never shares a queue with a
// request key of the same name.
const appQueue = "\x00app\x00"

// acquireOn reserves a burst of n on key under strat, waiting for its turn in queue qkey and
// then for room.
func (t *Transport) acquireOn(ctx context.Context, strat *strategy.Strategy, key, qkey string, n int) (strategy.Result, error) {
	if err := ctx.Err(); err != nil {
		return strategy.Result{}, err
	}
	// reserve asks the store once; a refusal whose wait would pass the deadline is an error.
	reserve := func() (strategy.Result, error) {
		res, err := t.store.Reserve(ctx, strat, key, n)
		if err != nil {
			return res, &StoreError{Key: key, Err: err}
		}
		if !res.Allowed {
			err = deadlineCheck(ctx, key, n, res.Wait)
		}
		return res, err
	}
	sh := t.pacer.shard(qkey)
	sh.mu.Lock()
	q := sh.queues[qkey]
	if q == nil {
		// Nobody waits on this key: try at once, without queueing.
		sh.mu.Unlock()
		if res, err := reserve(); err != nil || res.Allowed {
			return res, err
		}
		sh.mu.Lock()
		if q = sh.queues[qkey]; q == nil {
			if sh.queues == nil {
				sh.queues = map[string]*queue{}
			}
			q = &queue{}
			sh.queues[qkey] = q
		}
	}
	w := &waiter{n: n, turn: make(chan struct{})}
	ahead := 0
	for _, o := range q.waiters {
		ahead += o.n
	}
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 {
		close(w.turn)
	}
	sh.mu.Unlock()
	defer t.leave(sh, qkey, q, w)

	if ahead > 0 {
		if err := t.queueDeadlineCheck(ctx, strat, key, n, ahead); err != nil {
			return strategy.Result{}, err
		}
		select {
		case <-w.turn:
		case <-ctx.Done():
			return strategy.Result{}, ctx.Err()
		}
	}
	for {
		res, err := reserve()
		if err != nil || res.Allowed {
			return res, err
		}
		if err := t.clock.Sleep(ctx, res.Wait); err != nil {
			return res, err
		}
	}
}

// leave takes w out of its queue and hands the turn to the next waiter.
func (t *Transport) leave(sh *pacerShard, key string, q *queue, w *waiter) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i, o := range q.waiters {
		if o == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if i == 0 && len(q.waiters) > 0 {
				close(q.waiters[0].turn)
			}
			break
		}
	}
	if len(q.waiters) == 0 && sh.queues[key] == q {
		delete(sh.queues, key)
	}
}

// queueDeadlineCheck refuses at once a waiter that cannot get its turn before ctx's deadline:
// the requests ahead of it and its own must all fit, which takes at least the wait for their
// sum (capped at the smallest limit, the most a window can ever hold).
func (t *Transport) queueDeadlineCheck(ctx context.Context, strat *strategy.Strategy, key string, n, ahead int) error {
	if _, ok := ctx.Deadline(); !ok {
		return nil
	}
	snap, err := t.store.Peek(ctx, strat, key, min(n+ahead, strat.MaxBurst()))
	if err != nil {
		return nil // the head's own reserve will report the store's state
	}
	return deadlineCheck(ctx, key, n, snap.Wait)
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

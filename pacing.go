package ratemonitor

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// WithPacing makes RoundTrip wait for a free slot before each attempt instead of only recording
// it: the attempt is reserved in the store (check and record in one atomic step, so concurrent
// senders never overshoot a rule), waiting as long as needed. See Transport.RoundTrip for how
// the request's context bounds the wait, and Transport.Reserve for fairness. A paced Transport's
// StoreErrorPolicy is Degrade unless WithStoreErrorPolicy says otherwise.
func WithPacing() Option {
	return func(t *Transport) error {
		t.pace.on = true
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
	overtaken int           // waiters that arrived later and got the turn first (maxOvertakes)
	turn      chan struct{} // closed when the waiter becomes the head
	// reserving: the head is asking the store, or was granted and is leaving: its n is in the
	// store, or about to be, and servedBefore leaves it out (see checkAhead).
	reserving atomic.Bool
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
// when none are. Waiters at a meter's key are not counted.
func (t *Transport) Queued(key string) int {
	return t.queued(key) + t.queued(inflightQueue+key)
}

// queued returns the length of the pacer queue qkey (a key's, or one named by a queue prefix).
func (t *Transport) queued(qkey string) int {
	key := qkey
	if t.pace.queues.nq.Load() == 0 {
		return 0
	}
	sh := t.pace.queues.shard(key)
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

// acquire reserves a burst of n on key and every charge of lim.meters (n each of its own),
// waiting its turn in key's queue and then until all have room at the same moment. It returns
// the instant the burst was recorded at on key (each meter's goes in its charge's at), and the
// Transport's clock just before the store was asked for them (no later than the store's own
// instant).
//
// A store error comes back as a *StoreError; a context that ends first comes back as its error,
// and a wait that would pass its deadline, at once, as a *DeadlineError. On error nothing stays
// recorded, except what was taken when a meter's store call failed and keepOnStoreError is set
// (the request is then sent anyway, under SendUncounted). local is read only when wantLocal is
// set (a clock read per reserve that a paced RoundTrip without WithCostReport does not need),
// and is zero otherwise.
func (t *Transport) acquire(ctx context.Context, key string, n int, keepOnStoreError, wantLocal bool, lim limits) (at, local time.Time, err error) {
	if t.obs == nil {
		return t.acquireSlots(ctx, key, n, keepOnStoreError, wantLocal, lim)
	}
	start := t.clock.Now()
	at, local, err = t.acquireSlots(ctx, key, n, keepOnStoreError, wantLocal, lim)
	if err == nil {
		t.waited(key, n, start)
	}
	return at, local, err
}

// slotAsk is one acquire: what it asks the store for, and what it got.
type slotAsk struct {
	key                         string
	n                           int
	keepOnStoreError, wantLocal bool
	lim                         limits
	at, local                   time.Time
	// refusedBy says what refused the last reserve: keyTurn for the key's own rules, or the
	// index in lim.meters of the meter that did.
	refusedBy int
}

// keyTurn is the key's place in slotAsk.refusedBy and turn.at, apart from the meters' indexes.
const keyTurn = -1

// acquireSlots is acquire without the observer's Waited event.
//
// A waiter holds one turn at a time: the key's, or a meter's. It waits for a turn only while it
// holds none, so no two waiters can each hold a turn the other waits for; and it holds a turn
// only while what that queue is for (the key, or that meter) is what it waits on, so that it
// never holds up requests that the limit it waits on does not concern. It starts at the key's
// turn; refused by a meter, it gives the key's turn up and waits its turn at that meter, asking
// for every charge again from there (having had its turn at the key once); refused by the key
// again, it goes back to the key's queue.
func (t *Transport) acquireSlots(ctx context.Context, key string, n int, keepOnStoreError, wantLocal bool, lim limits) (at, local time.Time, err error) {
	if err := ctx.Err(); err != nil {
		return at, local, err
	}
	// Nobody waits on this key: try at once, without queueing. Not over a store that contends:
	// callers arriving together would race for the key's item there, so every caller takes the
	// key's turn. Not with meters either: there a reserve holds the key's slot for a moment
	// while it asks the meters, and a caller arriving together, refused by that slot, would be
	// told to wait a whole window for it. (reserveOnce's key part, without a slotAsk: this is
	// the paced RoundTrip's common path.)
	if !t.share.contends && len(lim.meters) == 0 && lim.strat != nil && t.queued(key) == 0 {
		if wantLocal {
			local = t.clock.Now()
		}
		res, err := t.reserveKey(ctx, lim, key, n, keepOnStoreError)
		switch {
		case err != nil:
			return at, local, err
		case res.Allowed:
			return res.At, local, nil
		}
		if err := deadlineCheck(ctx, key, "", n, res.Wait); err != nil {
			return at, local, err
		}
	}
	a := slotAsk{key: key, n: n, keepOnStoreError: keepOnStoreError, wantLocal: wantLocal, lim: lim}
	// MaxOvertakes across the key's queue and the meters': only the queues read it, so a
	// request served at once above needs none (a context and its value, two allocations).
	ctx = withPasses(ctx)
	tn := turn{at: keyTurn}
	defer func() { tn.give() }()
	if err := t.takeTurn(ctx, &tn, &a, keyTurn); err != nil {
		return a.at, a.local, err
	}
	for {
		tn.reserving(true)
		wait, err := t.reserveOnce(ctx, &a)
		if err != nil || wait == 0 {
			return a.at, a.local, err
		}
		tn.reserving(false) // refused: it will take its n later, after a wait
		if a.refusedBy != tn.at {
			// Refused by another limit than the one this turn is for: wait on that one's.
			if err := t.takeTurn(ctx, &tn, &a, a.refusedBy); err != nil {
				return a.at, a.local, err
			}
			continue
		}
		if err := t.clock.Sleep(ctx, t.nap(wait)); err != nil {
			return a.at, a.local, err
		}
	}
}

// turn is the one turn a waiter holds: at keyTurn or a meter's index, with the func that gives
// it back (nil: none held) and the waiter that holds it.
type turn struct {
	at    int
	leave func()
	w     *waiter
}

// give gives the turn back, if one is held.
func (tn *turn) give() {
	if tn.leave != nil {
		tn.leave()
		tn.leave, tn.w = nil, nil
	}
}

// reserving says whether the turn's holder is asking the store (waiter.reserving).
func (tn *turn) reserving(on bool) {
	if tn.w != nil {
		tn.w.reserving.Store(on)
	}
}

// takeTurn gives tn up and waits for the turn at (keyTurn, or a meter's index) for a: at the
// key, then for room on the key (waitKey), and then, when another waiter is queued at one of
// a's meters, for the turn there instead, so as not to pass it. A meter's turn is the order at
// that meter's key across every key of this Transport, so that a burst is not starved by single
// requests of other keys.
func (t *Transport) takeTurn(ctx context.Context, tn *turn, a *slotAsk, at int) error {
	tn.give()
	tn.at = at
	if at == keyTurn {
		leave, w, err := t.joinWaiter(ctx, a.key, a.n, func(ahead int) error { return t.queueDeadlineCheck(ctx, a.key, a.n, ahead, a.lim) })
		if err != nil {
			return err
		}
		tn.leave, tn.w = leave, w
		if len(a.lim.meters) == 0 {
			return nil
		}
		if err := t.waitKey(ctx, a.key, a.n, a.lim); err != nil {
			return err
		}
		for i, c := range a.lim.meters {
			if t.queued(meterQueue+c.m.name+"\x00"+c.key) > 0 {
				return t.takeTurn(ctx, tn, a, i)
			}
		}
		return nil
	}
	c := &a.lim.meters[at]
	leave, w, err := t.joinWaiter(ctx, meterQueue+c.m.name+"\x00"+c.key, c.n, func(ahead int) error {
		snap, err := t.ops.Peek(ctx, c.strat, c.key, min(c.n+ahead, c.strat.MaxBurst()))
		if err != nil {
			return nil
		}
		return deadlineCheck(ctx, a.key, c.m.name, a.n, snap.Wait)
	})
	if err != nil {
		return err
	}
	tn.leave, tn.w = leave, w
	return nil
}

// reserveOnce asks the store once for the key's slots and then each meter's. The key's slots
// are never held while waiting for a meter's: a slot is counted from the instant it is
// recorded, so one held for a while before the send would free early by as much. It returns 0
// once all are granted (a.at, and each charge's at), or the wait before asking again, the
// longest of the keys'; a refusal whose wait would pass the deadline is an error.
func (t *Transport) reserveOnce(ctx context.Context, a *slotAsk) (time.Duration, error) {
	lim := a.lim
	if a.wantLocal {
		a.local = t.clock.Now()
	}
	gen := t.gen() // before the reserve: a switch since then keeps the slots (releaseIn)
	a.refusedBy = keyTurn
	res, err := t.reserveKey(ctx, lim, a.key, a.n, a.keepOnStoreError)
	if err != nil {
		return 0, err
	}
	switch {
	case len(lim.meters) == 0 && res.Allowed:
		a.at = res.At
		return 0, nil
	case len(lim.meters) == 0:
		return res.Wait, deadlineCheck(ctx, a.key, "", a.n, res.Wait)
	case res.Allowed:
		return t.reserveMeters(ctx, a, res, gen)
	}
	return t.waitAll(ctx, a.key, a.n, res.Wait, "", lim.meters)
}

// reserveKey asks the store once for n on key under lim.strat (granted at once when lim.strat
// is nil: counted on the key further out, only meters left). A store error comes back as a
// *StoreError, or as the context's error when it has ended; under keepOnStoreError the meters
// still record the request, which is sent anyway (SendUncounted).
func (t *Transport) reserveKey(ctx context.Context, lim limits, key string, n int, keepOnStoreError bool) (engine.Result, error) {
	if lim.strat == nil {
		return engine.Result{Allowed: true}, nil
	}
	res, err := t.reserveOn(ctx, lim.strat, key, n)
	if err == nil {
		if t.obs != nil { // checked here too: reserved is not inlined
			t.reserved(key, n, res)
		}
		return res, nil
	}
	if ctx.Err() != nil {
		return res, gaveUp(ctx, err) // the caller gave up: not the store's failure
	}
	if keepOnStoreError {
		t.recordMeters(ctx, lim.meters)
	}
	return res, &StoreError{Key: key, Err: err}
}

// reserveMeters is reserveOnce once the key granted res: it reserves each meter's charge in
// order, and when one refuses or fails gives back the key's slots and the meters' taken so far
// (but under SendUncounted, where the request goes anyway and the rest are recorded).
func (t *Transport) reserveMeters(ctx context.Context, a *slotAsk, res engine.Result, gen uint64) (time.Duration, error) {
	mc := a.lim.meters
	for i := range mc {
		c := &mc[i]
		mres, err := t.reserveOn(ctx, c.strat, c.key, c.n)
		if err == nil && t.obs != nil {
			t.reserved(c.key, c.n, mres)
		}
		switch {
		case err == nil && mres.Allowed:
			c.at = mres.At
			continue
		case err == nil:
			a.refusedBy = i
		case err != nil && ctx.Err() != nil:
			// The caller gave up: give the slots back and say so.
			t.giveBack(ctx, a, res, gen, i)
			return 0, gaveUp(ctx, err)
		case err != nil && a.keepOnStoreError:
			a.at = res.At
			t.recordMeters(ctx, mc[i+1:])
			return 0, &StoreError{Key: c.key, Err: err}
		case err != nil:
			t.giveBack(ctx, a, res, gen, i)
			return 0, &StoreError{Key: c.key, Err: err}
		}
		t.giveBack(ctx, a, res, gen, i)
		return t.waitAll(ctx, a.key, a.n, mres.Wait, c.m.name, mc[i+1:])
	}
	a.at = res.At
	return 0, nil
}

// giveBack releases, even if ctx has ended (they were never used), the key's slots res and
// those of the first k meter charges of a.
func (t *Transport) giveBack(ctx context.Context, a *slotAsk, res engine.Result, gen uint64, k int) {
	ctx = context.WithoutCancel(ctx)
	if a.lim.strat != nil {
		t.releaseIn(ctx, gen, a.lim.strat, a.key, res.At, a.n)
	}
	for i := range a.lim.meters[:k] {
		c := &a.lim.meters[i]
		t.releaseIn(ctx, gen, c.strat, c.key, c.at, c.n)
		c.at = time.Time{}
	}
}

// recordMeters records each charge of mc, for a request sent anyway after a store error
// (SendUncounted); their own errors are dropped: the first one is being reported.
func (t *Transport) recordMeters(ctx context.Context, mc []meterCharge) {
	for _, c := range mc {
		t.recordOn(ctx, c.strat, c.key, c.n)
	}
}

// waitAll returns the longest of wait (that of meter, "" for the key's rules) and the waits,
// read by Peek, until the charges of mc fit, and deadlineCheck's error for it, naming the meter
// whose wait it is. A meter whose store call fails adds no wait (the reserve that follows
// reports it).
func (t *Transport) waitAll(ctx context.Context, key string, n int, wait time.Duration, meter string, mc []meterCharge) (time.Duration, error) {
	for _, c := range mc {
		if snap, err := t.ops.Peek(ctx, c.strat, c.key, c.n); err == nil && snap.Wait > wait {
			wait, meter = snap.Wait, c.m.name
		}
	}
	return wait, deadlineCheck(ctx, key, meter, n, wait)
}

// waitKey sleeps until a burst of n fits on key alone, or returns a *DeadlineError at once
// when that wait, or a meter's, would pass ctx's deadline.
func (t *Transport) waitKey(ctx context.Context, key string, n int, lim limits) error {
	if lim.strat == nil {
		return nil
	}
	for {
		snap, err := t.ops.Peek(ctx, lim.strat, key, n)
		if err != nil || snap.Wait == 0 {
			return nil // the store's error, if any, comes from the reserve that follows
		}
		if _, err := t.waitAll(ctx, key, n, snap.Wait, "", lim.meters); err != nil {
			return err
		}
		if err := t.clock.Sleep(ctx, t.nap(snap.Wait)); err != nil {
			return err
		}
	}
}

// meterQueue prefixes a meter key's queue in the pacer (with the meter's name), so that it
// never shares a queue with a request key, or another meter's key, of the same name.
const meterQueue = "\x00meter\x00"

// join queues a waiter for n on queue qkey, at ctx's priority, and waits for its turn. When
// others are ahead and ctx has a deadline, check is called first with the requests held by
// the waiters that would get their turn before this one (servedBefore), to refuse at once a
// wait that cannot end before the deadline. The returned func takes the waiter out and hands
// the turn on; it must be called once the waiter is done, and is already called when join
// fails.
func (t *Transport) join(ctx context.Context, qkey string, n int, check func(ahead int) error) (func(), error) {
	leave, _, err := t.joinWaiter(ctx, qkey, n, check)
	return leave, err
}

// joinWaiter is join, returning the waiter too, for its head to say when it asks the store
// (waiter.reserving).
func (t *Transport) joinWaiter(ctx context.Context, qkey string, n int, check func(ahead int) error) (func(), *waiter, error) {
	sh := t.pace.queues.shard(qkey)
	sh.mu.Lock()
	q := sh.queues[qkey]
	if q == nil {
		if sh.queues == nil {
			sh.queues = map[string]*queue{}
		}
		q = &queue{}
		sh.queues[qkey] = q
		sh.nq.Add(1)
		t.pace.queues.nq.Add(1)
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
			if err := checkAhead(sh, q, w, ahead, check); err != nil {
				leave()
				return nil, nil, err
			}
		}
		select {
		case <-w.turn:
		case <-ctx.Done():
			leave()
			return nil, nil, ctx.Err()
		}
		if carried != nil {
			sh.mu.Lock() // the head is passed no more: its count is final
			carried.n.Store(int64(w.overtaken))
			sh.mu.Unlock()
		}
	}
	return leave, w, nil
}

// checkAhead runs check with the requests served before w (ahead), and again when it refuses
// and the queue has moved since ahead was read: a head that started asking the store meanwhile
// may be in what check read from the store as well as in ahead, counted twice, which would
// refuse a waiter whose requests fit. A head is left out of servedBefore from the moment it
// asks (waiter.reserving), so a refusal that stands was read with no head granted twice. After a
// few moves it lets w wait: its own turn then decides, as the head's reserve does.
func checkAhead(sh *pacerShard, q *queue, w *waiter, ahead int, check func(int) error) error {
	for range 4 {
		err := check(ahead)
		if err == nil {
			return nil
		}
		sh.mu.Lock()
		now := 0
		if i := slices.Index(q.waiters, w); i > 0 {
			now = servedBefore(q.waiters[:i+1], q.head, w)
		}
		sh.mu.Unlock()
		if now == ahead {
			return err
		}
		if now == 0 {
			return nil
		}
		ahead = now
	}
	return nil
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
		t.pace.queues.nq.Add(-1)
	}
}

// queueDeadlineCheck refuses at once a waiter that cannot get its turn before ctx's deadline:
// the requests ahead of it and its own must all fit, which takes at least the wait for their
// sum, or, when the sum is more than can ever go at once (MaxBurst), the wait for one plus
// the least time the sum takes to go one after another (minSpan).
func (t *Transport) queueDeadlineCheck(ctx context.Context, key string, n, ahead int, lim limits) error {
	if _, ok := ctx.Deadline(); !ok {
		return nil
	}
	if lim.strat == nil {
		_, err := t.waitAll(ctx, key, n, 0, "", lim.meters)
		return err
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
	// Each meter must have room for this burst too, whatever other keys take meanwhile.
	_, err = t.waitAll(ctx, key, n, wait, "", lim.meters)
	return err
}

// deadlineCheck returns a *DeadlineError when waiting d, for meter ("" for the key's rules),
// would pass ctx's deadline.
func deadlineCheck(ctx context.Context, key, meter string, n int, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return &DeadlineError{Key: key, Meter: meter, N: n, Wait: d}
	}
	return nil
}

// DeadlineError is returned, at once, when n requests on a key would have to wait past the
// context's deadline: by a paced RoundTrip, Reserve and Wait. Nothing was sent or recorded. It
// wraps context.DeadlineExceeded, so errors.Is(err, context.DeadlineExceeded) holds.
type DeadlineError struct {
	Key   string        // the key waited on
	Meter string        // the meter whose wait it is (Meter.Name); "" for the key's own rules
	N     int           // the requests asked for
	Wait  time.Duration // the least wait they needed, from when it was checked
}

// Error says how long the wait would have been.
func (e *DeadlineError) Error() string {
	w := e.Wait
	if w >= time.Millisecond {
		w = w.Round(time.Millisecond)
	}
	if e.Meter != "" {
		return fmt.Sprintf("ratemonitor: %d request(s) on key %q need a wait of %v for meter %q, past the context's deadline", e.N, e.Key, w, e.Meter)
	}
	return fmt.Sprintf("ratemonitor: %d request(s) on key %q need a wait of %v, past the context's deadline", e.N, e.Key, w)
}

// Unwrap returns context.DeadlineExceeded.
func (e *DeadlineError) Unwrap() error { return context.DeadlineExceeded }

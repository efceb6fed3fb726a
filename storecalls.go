package ratemonitor

import (
	"context"
	"errors"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/contend"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The Transport's calls to its store, on every request path: each goes to t.ops (the store, or
// degraded mode's decorator), retries contention, and gives slots back only in the degraded
// mode's generation they were taken in.
//
// Contention (cache.ErrContended) is not an outage: the store lost an optimistic race on the
// key and recorded nothing. The Transport's store writes go through the helpers below, which
// try again until the request's context ends, so that the StoreErrorPolicy never sees contention
// and nothing is sent uncounted because of it. Over a store that contends (cache.Traits.Contends)
// the Transport's own callers also take turns per key (pacing's queue; recordTurn in
// monitoring mode), so that they do not fight over the key among themselves. Over the others
// (memory, Redis, SQLite) the helpers cost one error check per call, and take no turn.

// reserveOn is t.store.Reserve, retrying contention within ctx. Small enough to inline: an
// engine.Result is too wide to stay in registers, and each function it passes through on the
// paced path copies it through the stack.
func (t *Transport) reserveOn(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := t.ops.Reserve(ctx, s, key, n)
	if err != nil {
		return t.reserveRetry(ctx, s, key, n, res, err)
	}
	return res, nil
}

// reserveRetry is reserveOn once the store returned err: tried again while it is contention.
func (t *Transport) reserveRetry(ctx context.Context, s *engine.Strategy, key string, n int, res engine.Result, err error) (engine.Result, error) {
	if !errors.Is(err, cache.ErrContended) {
		return res, err
	}
	return contend.Retry(ctx, err, func() (engine.Result, error) { return t.ops.Reserve(ctx, s, key, n) })
}

// recordOn is t.store.Record, retrying contention within ctx.
func (t *Transport) recordOn(ctx context.Context, s *engine.Strategy, key string, n int) error {
	err := t.ops.Record(ctx, s, key, n)
	if err != nil && errors.Is(err, cache.ErrContended) {
		_, err = contend.Retry(ctx, err, func() (struct{}, error) { return struct{}{}, t.ops.Record(ctx, s, key, n) })
	}
	return err
}

// releaseTimeout bounds the retries of a Release whose context never ends (slots given back
// after the caller gave up): a Release that fails leaves the slots counted until they expire,
// an over-count, never an under-count.
const releaseTimeout = time.Second

// releaseOn is t.store.Release, retrying contention within ctx, and within releaseTimeout when
// ctx has no end.
func (t *Transport) releaseOn(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	err := t.ops.Release(ctx, s, key, at, n)
	if err != nil && errors.Is(err, cache.ErrContended) {
		if ctx.Done() == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, releaseTimeout)
			defer cancel()
		}
		_, err = contend.Retry(ctx, err, func() (struct{}, error) { return struct{}{}, t.ops.Release(ctx, s, key, at, n) })
	}
	return err
}

// recordTurn waits for this caller's turn to record on key (and on each meter's key, with
// meters) when the store contends, and returns the func that gives the turns back. Over
// other stores it returns at once. The error is ctx's, when it ends first. Records take turns
// apart from pacing's queue, whose head may sleep until a slot frees: a record never waits
// for room.
func (t *Transport) recordTurn(ctx context.Context, key string) (func(), error) {
	if !t.share.contends {
		return func() {}, nil
	}
	leaveKey, err := t.share.recordTurns.Take(ctx, key)
	if err != nil || len(t.meters) == 0 {
		return leaveKey, err
	}
	// Always the key's turn first, then each meter's in the meters' order, in one turn space
	// of their own: no two callers can each hold what the other waits for.
	leaves := []func(){leaveKey}
	leaveAll := func() {
		for i := len(leaves) - 1; i >= 0; i-- {
			leaves[i]()
		}
	}
	for _, m := range t.meters {
		leave, err := t.share.recordMeterTurns.Take(ctx, m.name+"\x00"+m.keyFor(key))
		if err != nil {
			leaveAll()
			return nil, err
		}
		leaves = append(leaves, leave)
	}
	return leaveAll, nil
}

// gaveUp returns the error for a store call that failed after ctx ended: the contention
// retry's own error when it is one (it says what happened and wraps ctx's error), taken out of
// a *StoreError, since contention is not a store failure; else ctx's error.
func gaveUp(ctx context.Context, err error) error {
	if !errors.Is(err, cache.ErrContended) {
		return ctx.Err()
	}
	if se, ok := errors.AsType[*StoreError](err); ok {
		return se.Err
	}
	return err
}

// gen returns the degraded mode's generation (see degrade.Store.Gen), 0 without one.
func (t *Transport) gen() uint64 {
	if t.fail.deg == nil {
		return 0
	}
	return t.fail.deg.Gen()
}

// releaseIn is releaseOn for slots reserved when the generation was gen: when the Transport
// has switched between the shared and the memory store since, the slots' instant belongs to
// the other store, so nothing is given back (the slots stay counted until they expire: an
// over-count, never an under-count).
func (t *Transport) releaseIn(ctx context.Context, gen uint64, s *engine.Strategy, key string, at time.Time, n int) error {
	if t.gen() != gen {
		return nil
	}
	return t.releaseOn(ctx, s, key, at, n)
}

// nap is how long to sleep for a wait of d: while degraded, at most ProbeInterval, so that a
// caller told to wait out the hold-back (a whole window) asks again, and meets the shared
// store, soon after it answers. Deadline checks use the whole wait.
func (t *Transport) nap(d time.Duration) time.Duration {
	d = t.fixedNap(d)
	if t.fail.deg == nil {
		return d
	}
	return t.fail.deg.Nap(d)
}

// Package contend retries a store operation that lost an optimistic race on its key
// (cache.ErrContended) until it succeeds or the caller's context ends: contention is not an
// outage, so it is never handed to a StoreErrorPolicy.
package contend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
)

// Backoff bounds: try k (from 1) sleeps a random duration in [0, min(First·2^(k−1), Max)).
// Full jitter spreads writers that lost the same race; the cap keeps a waiter near the key
// while the store's own retries (a few ms each) run.
const (
	First = time.Millisecond
	Max   = 50 * time.Millisecond
)

// Retry calls op again, after a jittered backoff on the wall clock (contention is between
// real writers, whatever clock the caller paces on), for as long as it returns an error
// wrapping cache.ErrContended; err is the error of the call the caller already made (returned
// as it is when it is not contention). It returns op's first result that is not contention.
// When ctx ends first, between tries or during one, it returns an error that wraps both ctx's
// error and the last cache.ErrContended, and says how many tries were made: nothing was
// recorded by any of them.
func Retry[T any](ctx context.Context, err error, op func() (T, error)) (T, error) {
	var zero T
	if !errors.Is(err, cache.ErrContended) {
		return zero, err
	}
	start, last := time.Now(), err
	for try := 1; ; try++ {
		if err := sleep(ctx, try); err != nil {
			return zero, gaveUp(err, last, try, start)
		}
		v, err := op()
		switch {
		case err == nil:
			return v, nil
		case errors.Is(err, cache.ErrContended):
			last = err
		case ctx.Err() != nil:
			// The context ended during the try: what kept the key from the caller is still
			// the contention, not the store.
			return zero, gaveUp(ctx.Err(), last, try+1, start)
		default:
			return zero, err
		}
	}
}

func gaveUp(ctxErr, last error, tries int, start time.Time) error {
	return fmt.Errorf("ratemonitor: the store lost the race for the key to other writers on all %d tries in %v, until the context ended: %w (last: %w)",
		tries, time.Since(start).Round(time.Millisecond), ctxErr, last)
}

// sleep waits the backoff before try+1, or returns ctx's error.
func sleep(ctx context.Context, try int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ceil := Max
	if try < 16 && First<<(try-1) < Max {
		ceil = First << (try - 1)
	}
	t := time.NewTimer(rand.N(ceil) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

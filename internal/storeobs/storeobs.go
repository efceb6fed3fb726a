// Package storeobs reports a store's errors to its observer, for the stores of this repository.
package storeobs

import (
	"context"
	"errors"

	"github.com/ratemonitor/ratemonitor/observe"
)

// Failed sends o a StoreError event for err, unless o or err is nil or the error is the
// caller's (ctx ended, or err wraps context.Canceled). It returns err, so a store can write
// `return storeobs.Failed(ctx, o, "memory", "record", key, err)`.
func Failed(ctx context.Context, o observe.Observer, store, op, key string, err error) error {
	if o == nil || err == nil {
		return err
	}
	if (ctx != nil && ctx.Err() != nil) || errors.Is(err, context.Canceled) {
		return err
	}
	o.Observe(observe.Event{Kind: observe.StoreError, Store: store, Op: op, Key: key, Err: err})
	return err
}

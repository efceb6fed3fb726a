package degrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// StoreName is the name of st for events: the first word of its cache.Traits.Namespace
// ("redis"), or its Go type.
func StoreName(st cache.Store) string {
	if f := strings.Fields(traitsOf(st).Namespace); len(f) > 0 {
		return f[0]
	}
	return fmt.Sprintf("%T", st)
}

// traitsOf returns st's traits, the zero Traits for a store without cache.Describer.
func traitsOf(st cache.Store) cache.Traits {
	if d, ok := st.(cache.Describer); ok {
		return d.Describe()
	}
	return cache.Traits{}
}

// IsOutage reports whether err, from the shared store, means the store is unreachable: any
// error but the caller's (ctx ended, or its deadline passed: a client that sets its
// connection's deadline to the context's can fail a moment before the context's own timer
// fires), contention (cache.ErrContended: an optimistic race, not an outage), a closed store,
// and errors about the request itself (counts, bursts, updates).
func IsOutage(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return false
	}
	for _, not := range []error{context.Canceled, cache.ErrContended, cache.ErrClosed, cache.ErrInvalidCount,
		strategy.ErrInvalidBurst, strategy.ErrBurstTooLarge, engine.ErrInvalidUpdate, cache.ErrCounterConflict} {
		if errors.Is(err, not) {
			return false
		}
	}
	return true
}

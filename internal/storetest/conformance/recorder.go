package conformance

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/contend"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Store is what the suite drives: a cache.Store that admits (every store does).
type Store interface {
	cache.Store
	cache.Admitter
}

// tagKey carries a *tag in a request's context, so that the recorder can say which request a
// store granted (the Transport hands the request's context to the store).
type tagKey struct{}

// tag is what the recorder learnt about one request: the instant its slot was granted at.
type tag struct {
	mu      sync.Mutex
	granted bool
	at      time.Time
}

func (g *tag) set(at time.Time) {
	g.mu.Lock()
	g.granted, g.at = true, at
	g.mu.Unlock()
}

func (g *tag) get() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.at, g.granted
}

// recorder wraps a store and keeps every grant it gave (Reserve, Admit), every attempt it
// counted (Record, and Admit under the fixed window) and the waits it told, for the model. It
// passes the store's Validate and clock through, so that a Transport or Limiter made over it
// behaves as over the store itself.
type recorder struct {
	Store
	mu        sync.Mutex
	grants    []storetest.Grant
	released  []storetest.Grant
	waits     []time.Duration
	errs      int
	contended int // errors that say the key was contended
	lastErr   error
	lastErrAt time.Time
	// real, when set, is the true time (a clock that is not stepped): each grant is also kept
	// at its true instant, for judging what an upstream would see across a clock step.
	real   clock.Clock
	atReal []storetest.Grant
}

var _ cache.Describer = (*recorder)(nil)

// Describe forwards the store's traits, so that a Transport or Limiter over the recorder treats
// it as it would the store (the same validation, turns on a store that contends, no degraded
// mode over one in process, the same Sharing), with the real clock when the store has none in
// this process: what a Transport uses over such a store.
func (r *recorder) Describe() cache.Traits {
	var tr cache.Traits
	if d, ok := r.Store.(cache.Describer); ok {
		tr = d.Describe()
	}
	if tr.Clock == nil {
		tr.Clock = clock.Real()
	}
	return tr
}

// failed counts err as a store failure, unless the caller's context had ended (the run's
// deadline, a caller giving up): that is not the store's doing.
func (r *recorder) failed(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil {
		r.mu.Lock()
		r.errs++
		if strings.Contains(err.Error(), "contention") {
			r.contended++ // DynamoDB's ErrContended: not an outage (docs/reliability.md)
		}
		r.lastErr, r.lastErrAt = err, time.Now()
		r.mu.Unlock()
	}
}

// lastError returns the last store error and when it came (local clock); nil when none.
func (r *recorder) lastError() (error, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr, r.lastErrAt
}

func (r *recorder) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	totals.ops.Add(1)
	res, err := r.Store.Reserve(ctx, s, key, n)
	r.failed(ctx, err)
	if err != nil {
		return res, err
	}
	r.mu.Lock()
	if res.Allowed {
		r.grants = append(r.grants, storetest.Grant{At: res.At, N: n})
		if r.real != nil {
			r.atReal = append(r.atReal, storetest.Grant{At: r.real.Now(), N: n})
		}
	} else {
		r.waits = append(r.waits, res.Wait)
	}
	r.mu.Unlock()
	if g, ok := ctx.Value(tagKey{}).(*tag); ok && res.Allowed {
		g.set(res.At)
	}
	return res, nil
}

func (r *recorder) Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error) {
	totals.ops.Add(1)
	d, err := r.Store.Admit(ctx, s, key, n)
	r.failed(ctx, err)
	if err != nil {
		return d, err
	}
	r.mu.Lock()
	if d.Allowed {
		r.grants = append(r.grants, storetest.Grant{At: d.At, N: n})
		if r.real != nil {
			r.atReal = append(r.atReal, storetest.Grant{At: r.real.Now(), N: n})
		}
	} else {
		r.waits = append(r.waits, d.RetryAfter)
	}
	r.mu.Unlock()
	if g, ok := ctx.Value(tagKey{}).(*tag); ok && d.Allowed {
		g.set(d.At)
	}
	return d, nil
}

func (r *recorder) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	totals.ops.Add(1)
	err := r.Store.Release(ctx, s, key, at, n)
	r.failed(ctx, err)
	if err == nil {
		r.mu.Lock()
		r.released = append(r.released, storetest.Grant{At: at, N: n})
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) Record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	totals.ops.Add(1)
	err := r.Store.Record(ctx, s, key, n)
	r.failed(ctx, err)
	return err
}

func (r *recorder) Peek(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Snapshot, error) {
	totals.ops.Add(1)
	snap, err := r.Store.Peek(ctx, s, key, n)
	r.failed(ctx, err)
	return snap, err
}

// kept returns the grants less the ones given back (a Transport releases a slot it did not
// use), and the waits told.
func (r *recorder) kept() ([]storetest.Grant, []time.Duration, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := append([]storetest.Grant(nil), r.grants...)
	for _, rel := range r.released {
		for i := range g {
			if g[i].N > 0 && g[i].At.Equal(rel.At) {
				take := min(g[i].N, rel.N)
				g[i].N -= take
				rel.N -= take
				if rel.N == 0 {
					break
				}
			}
		}
	}
	out := g[:0]
	for _, x := range g {
		if x.N > 0 {
			out = append(out, x)
		}
	}
	return out, append([]time.Duration(nil), r.waits...), r.errs
}

// trueGrants returns the grants at their true instants (see recorder.real).
func (r *recorder) trueGrants() []storetest.Grant {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]storetest.Grant(nil), r.atReal...)
}

// contentions returns how many store errors said the key was contended.
func (r *recorder) contentions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.contended
}

// The suite's direct calls retry contention (cache.ErrContended) within their context, as every
// entry point of the library does (the Transport, Reserve, the middleware): a store that loses
// an optimistic race after its own bounded retries is not failing.

func (r *recorder) reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := r.Reserve(ctx, s, key, n)
	if err == nil {
		return res, nil
	}
	return contend.Retry(ctx, err, func() (engine.Result, error) { return r.Reserve(ctx, s, key, n) })
}

func (r *recorder) record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	err := r.Record(ctx, s, key, n)
	if err == nil {
		return nil
	}
	_, err = contend.Retry(ctx, err, func() (struct{}, error) { return struct{}{}, r.Record(ctx, s, key, n) })
	return err
}

func (r *recorder) admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error) {
	d, err := r.Admit(ctx, s, key, n)
	if err == nil {
		return d, nil
	}
	return contend.Retry(ctx, err, func() (strategy.Decision, error) { return r.Admit(ctx, s, key, n) })
}

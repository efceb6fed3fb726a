package storetest

import (
	"context"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Ref is the plainest store there is: the strategy's own counters in a map under one mutex,
// read at a clock. It is the reference the memory store is compared with in Differential (the
// other stores are compared with the memory store), so that what the memory store adds (the
// cache, its cost and eviction, the per-key locks) is judged too. It never evicts or expires.
type Ref struct {
	Clock clock.Clock
	mu    sync.Mutex
	keys  map[string]*refKey
}

type refKey struct {
	counters map[string]engine.Counter // by counter ID, shared across strategies
	up       engine.Upstream
}

var (
	_ Store      = (*Ref)(nil)
	_ AdmitStore = (*Ref)(nil)
	_ SyncStore  = (*Ref)(nil)
)

// NewRef returns an empty Ref reading clk.
func NewRef(clk clock.Clock) *Ref { return &Ref{Clock: clk, keys: map[string]*refKey{}} }

func (r *Ref) do(s *engine.Strategy, key string, fn func([]engine.Counter, *engine.Upstream, time.Time)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys[key]
	if k == nil {
		k = &refKey{counters: map[string]engine.Counter{}}
		r.keys[key] = k
	}
	cs := make([]engine.Counter, s.Slots())
	for j := range cs {
		id := s.CounterID(j)
		if k.counters[id] == nil {
			k.counters[id] = s.NewCounter(j)
		}
		cs[j] = k.counters[id]
	}
	fn(cs, &k.up, r.Clock.Now())
}

// Record implements cache.Store.
func (r *Ref) Record(_ context.Context, s *engine.Strategy, key string, n int) error {
	r.do(s, key, func(cs []engine.Counter, _ *engine.Upstream, now time.Time) { s.Record(cs, now, n) })
	return nil
}

// Reserve implements cache.Store.
func (r *Ref) Reserve(_ context.Context, s *engine.Strategy, key string, n int) (res engine.Result, err error) {
	if err := s.CheckBurst(n); err != nil {
		return res, err
	}
	r.do(s, key, func(cs []engine.Counter, up *engine.Upstream, now time.Time) {
		res, err = s.Reserve(cs, up, now, n)
	})
	return res, err
}

// Admit implements cache.Admitter.
func (r *Ref) Admit(_ context.Context, s *engine.Strategy, key string, n int) (d strategy.Decision, err error) {
	if err := s.CheckBurst(n); err != nil {
		return d, err
	}
	r.do(s, key, func(cs []engine.Counter, _ *engine.Upstream, now time.Time) { d, err = s.Admit(cs, now, n) })
	return d, err
}

// Release implements cache.Store.
func (r *Ref) Release(_ context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	r.do(s, key, func(cs []engine.Counter, _ *engine.Upstream, _ time.Time) { s.Release(cs, at, n) })
	return nil
}

// Peek implements cache.Store.
func (r *Ref) Peek(_ context.Context, s *engine.Strategy, key string, n int) (snap strategy.Snapshot, err error) {
	if n != 0 {
		if err := s.CheckBurst(n); err != nil {
			return snap, err
		}
	}
	r.do(s, key, func(cs []engine.Counter, up *engine.Upstream, now time.Time) {
		snap, err = s.Peek(cs, up, now, n)
	})
	return snap, err
}

// Sync implements cache.Syncer.
func (r *Ref) Sync(_ context.Context, s *engine.Strategy, key string, u engine.Update) error {
	if err := s.CheckUpdate(u); err != nil {
		return err
	}
	r.do(s, key, func(cs []engine.Counter, up *engine.Upstream, now time.Time) { s.Sync(cs, up, now, u) })
	return nil
}

// Close implements cache.Store.
func (r *Ref) Close() error { return nil }

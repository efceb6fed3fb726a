package cache

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/storecheck"
)

// leases is the memory store's Leaser state: per key, the expiry of each lease held, on the
// store's clock. A key's map goes when its last lease does; expired leases are dropped by the
// next call on their key, and every sweepEvery acquires by a walk of the whole table, so that
// keys nobody asks again do not stay (a Transport releases or renews every lease it holds, so
// only a lease whose holder vanished without Close can expire unasked).
type leases struct {
	mu       sync.Mutex
	keys     map[string]map[string]time.Time
	next     uint64 // the last lease id handed out
	acquires uint64 // AcquireLease calls, for the sweep
}

// sweepEvery is how many acquires pass between walks of the whole lease table.
const sweepEvery = 1024

// sweep drops every expired lease, and the keys left without one.
func (l *leases) sweep(now time.Time) {
	for key := range l.keys {
		l.live(key, now)
	}
}

var _ Leaser = (*Memory)(nil)

// live returns key's leases after dropping the expired ones (expiry ≤ now), or nil.
func (l *leases) live(key string, now time.Time) map[string]time.Time {
	held := l.keys[key]
	for id, exp := range held {
		if !now.Before(exp) {
			delete(held, id)
		}
	}
	if len(held) == 0 && held != nil {
		delete(l.keys, key)
		return nil
	}
	return held
}

// AcquireLease implements Leaser in this process, on the store's clock: exact to the
// nanosecond. Errors: ErrInvalidLease's, and ErrClosed after Close.
func (m *Memory) AcquireLease(ctx context.Context, key string, limit int, ttl time.Duration) (Lease, error) {
	if err := storecheck.Lease(limit, ttl); err != nil {
		return Lease{}, err
	}
	if m.closed.Load() {
		return Lease{}, m.fail(ctx, "acquire", key, ErrClosed)
	}
	l := &m.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	now := m.clock.Now()
	if l.acquires++; l.acquires%sweepEvery == 0 {
		l.sweep(now)
	}
	held := l.live(key, now)
	if len(held) >= limit {
		first := time.Time{}
		for _, exp := range held {
			if first.IsZero() || exp.Before(first) {
				first = exp
			}
		}
		return Lease{Held: len(held), Wait: first.Sub(now)}, nil
	}
	if held == nil {
		if l.keys == nil {
			l.keys = map[string]map[string]time.Time{}
		}
		held = map[string]time.Time{}
		l.keys[key] = held
	}
	l.next++
	id := strconv.FormatUint(l.next, 10)
	held[id] = now.Add(ttl)
	return Lease{ID: id, Held: len(held)}, nil
}

// RenewLease implements Leaser. Errors are AcquireLease's.
func (m *Memory) RenewLease(ctx context.Context, key, id string, ttl time.Duration) (bool, error) {
	if err := storecheck.Lease(1, ttl); err != nil {
		return false, err
	}
	if id == "" {
		return false, fmt.Errorf("%w: empty lease id", ErrInvalidLease)
	}
	if m.closed.Load() {
		return false, m.fail(ctx, "renew", key, ErrClosed)
	}
	l := &m.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	now := m.clock.Now()
	held := l.live(key, now)
	if _, ok := held[id]; !ok {
		return false, nil
	}
	held[id] = now.Add(ttl)
	return true, nil
}

// ReleaseLease implements Leaser. Errors: ErrInvalidLease for an empty id, ErrClosed after Close.
func (m *Memory) ReleaseLease(ctx context.Context, key, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty lease id", ErrInvalidLease)
	}
	if m.closed.Load() {
		return m.fail(ctx, "release", key, ErrClosed)
	}
	l := &m.leases
	l.mu.Lock()
	defer l.mu.Unlock()
	if held := l.keys[key]; held != nil {
		delete(held, id)
		l.live(key, m.clock.Now())
	}
	return nil
}

package cache

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// maxLimits is how many limit values the memory store keeps; past it, PutLimits drops the
// expired ones, then one at random: a Transport that finds none learns from its own answers.
const maxLimits = 1 << 16

// limitValues are the values of PutLimits, apart from the counters (never evicted by them).
type limitValues struct {
	mu sync.Mutex
	m  map[string]limitValue
}

type limitValue struct {
	v     []byte
	until time.Time // zero: no expiry
}

// PutLimits implements Syncer: v is kept for key (a copy) until ttl has passed on the store's
// clock (0: no expiry). A negative ttl or a closed store is an error.
func (m *Memory) PutLimits(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("ratemonitor: memory store: PutLimits of key %q: ttl %v is negative", key, ttl)
	}
	if m.closed.Load() {
		return m.fail(ctx, "put_limits", key, ErrClosed)
	}
	lv := limitValue{v: append([]byte(nil), v...)}
	now := m.clock.Now()
	if ttl > 0 {
		lv.until = now.Add(ttl)
	}
	l := &m.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]limitValue{}
	}
	if _, ok := l.m[key]; !ok && len(l.m) >= maxLimits {
		for k, o := range l.m {
			if !o.until.IsZero() && !now.Before(o.until) {
				delete(l.m, k)
			}
		}
		for k := range l.m {
			if len(l.m) < maxLimits {
				break
			}
			delete(l.m, k)
		}
	}
	l.m[key] = lv
	return nil
}

// Limits implements Syncer: the value PutLimits kept for key (a copy), nil when none or expired.
func (m *Memory) Limits(ctx context.Context, key string) ([]byte, error) {
	if m.closed.Load() {
		return nil, m.fail(ctx, "limits", key, ErrClosed)
	}
	l := &m.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	lv, ok := l.m[key]
	if !ok {
		return nil, nil
	}
	if !lv.until.IsZero() && !m.clock.Now().Before(lv.until) {
		delete(l.m, key)
		return nil, nil
	}
	return append([]byte(nil), lv.v...), nil
}

// Package leasetest holds the cases every cache.Leaser must pass (the memory and Redis stores).
package leasetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
)

// Run runs the cache.Leaser cases on l, whose clock is clk (a manual clock standing
// anywhere): exact waits, expiry at exactly the lease's end (a lease acquired and never
// released, as by a process that crashed, frees after its TTL), renewal, release, keys
// apart, bad arguments, and 16 goroutines × 50 acquires never holding more than the limit.
func Run(t *testing.T, l cache.Leaser, clk *clock.Manual) {
	ctx := context.Background()
	const ttl = 10 * time.Second
	key := t.Name() + "/k"
	acquire := func(k string, limit int) cache.Lease {
		t.Helper()
		got, err := l.AcquireLease(ctx, k, limit, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a, b := acquire(key, 2), acquire(key, 2)
	if !a.Acquired() || !b.Acquired() || a.Held != 1 || b.Held != 2 || a.ID == b.ID {
		t.Fatalf("two acquires under limit 2: %+v %+v, want two distinct leases, held 1 then 2", a, b)
	}
	if c := acquire(key, 2); c.Acquired() || c.Held != 2 || c.Wait != ttl {
		t.Fatalf("third acquire: %+v, want refused, held 2, wait %v", c, ttl)
	}
	if c := acquire(t.Name()+"/other", 2); !c.Acquired() || c.Held != 1 {
		t.Fatalf("another key: %+v, want its own first lease", c)
	}
	clk.Advance(4 * time.Second)
	if ok, err := l.RenewLease(ctx, key, b.ID, ttl); err != nil || !ok {
		t.Fatalf("renew b: %v %v, want true", ok, err)
	}
	if c := acquire(key, 2); c.Acquired() || c.Wait != 6*time.Second {
		t.Fatalf("at +4s: %+v, want refused with wait 6s (a's expiry)", c)
	}
	// a is never released (its holder crashed): it frees at exactly +10s.
	clk.Advance(6*time.Second - time.Microsecond)
	if c := acquire(key, 2); c.Acquired() || c.Wait != time.Microsecond {
		t.Fatalf("1µs before a's expiry: %+v, want refused with wait 1µs", c)
	}
	clk.Advance(time.Microsecond)
	c := acquire(key, 2)
	if !c.Acquired() || c.Held != 2 {
		t.Fatalf("at a's expiry: %+v, want a lease, held 2 (b renewed, c)", c)
	}
	if ok, err := l.RenewLease(ctx, key, a.ID, ttl); err != nil || ok {
		t.Fatalf("renew the expired a: %v %v, want false", ok, err)
	}
	if err := l.ReleaseLease(ctx, key, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseLease(ctx, key, b.ID); err != nil {
		t.Fatalf("release twice: %v, want nil", err)
	}
	if d := acquire(key, 2); !d.Acquired() || d.Held != 2 {
		t.Fatalf("after releasing b: %+v, want a lease, held 2", d)
	}
	for _, bad := range []struct {
		limit int
		ttl   time.Duration
	}{{0, ttl}, {1, 0}, {1, -time.Second}} {
		if _, err := l.AcquireLease(ctx, key, bad.limit, bad.ttl); !errors.Is(err, cache.ErrInvalidLease) {
			t.Errorf("AcquireLease(limit %d, ttl %v): %v, want ErrInvalidLease", bad.limit, bad.ttl, err)
		}
	}
	if err := l.ReleaseLease(ctx, key, ""); !errors.Is(err, cache.ErrInvalidLease) {
		t.Errorf("ReleaseLease(\"\"): %v, want ErrInvalidLease", err)
	}

	// Concurrency: never more than the limit held at once.
	const limit, workers, each = 3, 16, 50
	ck := t.Name() + "/conc"
	var mu sync.Mutex
	var held, most int
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				got, err := l.AcquireLease(ctx, ck, limit, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if !got.Acquired() {
					continue
				}
				taken.Add(1)
				mu.Lock()
				held++
				most = max(most, held)
				mu.Unlock()
				mu.Lock()
				held--
				mu.Unlock()
				if err := l.ReleaseLease(ctx, ck, got.ID); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most > limit || taken.Load() == 0 {
		t.Errorf("concurrent acquires: at most %d held at once (want ≤ %d), %d taken (want > 0)", most, limit, taken.Load())
	}
	if got := acquire(ck, 1); !got.Acquired() || got.Held != 1 {
		t.Errorf("after the concurrent run: %+v, want every lease given back", got)
	}
}

package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
)

//go:embed lease.lua
var leaseSource string

var leaseScript = redis.NewScript(leaseSource)

// leaseMagic ends the Redis key of a logical key's leases (a sorted set, lease.lua).
const leaseMagic = "if1"

// leaseTombMagic ends, after leaseMagic, the key of the ids released before their acquire ran
// (lease.lua op 4, lease_cutoff.go).
const leaseTombMagic = "t"

var _ cache.Leaser = (*Store)(nil)

// LeaseKey returns the Redis key that holds key's in-flight leases: a sorted set (member the
// lease id, score its expiry in µs of Redis TIME), "prefix:{k<base64url key>}:if1", in the
// same hash tag as the key's rate-limit state, so on a Cluster both live on one node; beside
// it, LeaseKey+"t" holds for a TTL the ids of acquires released after they were cut off. For
// inspection and tests.
func (st *Store) LeaseKey(key string) string {
	return st.opts.Prefix + ":{k" + base64.RawURLEncoding.EncodeToString([]byte(key)) + "}:" + leaseMagic
}

// leaseID returns a lease id unique across every process sharing the server: the store's
// random 64-bit tag (made at the first lease) and a count.
func (st *Store) leaseID() string {
	st.leaseOnce.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24 and later)
		st.leaseTag = hex.EncodeToString(b[:])
	})
	return st.leaseTag + "-" + strconv.FormatUint(st.leaseSeq.Add(1), 10)
}

// lease runs lease.lua once (route.go: the key's server's turn, the store's Timeout, never
// replayed) and returns {ok, held, wait µs}.
func (st *Store) lease(ctx context.Context, op, key string, code int, id string, limit int, ttl time.Duration) ([]int64, error) {
	res, _, err := st.leaseSent(ctx, op, key, code, id, limit, ttl)
	return res, err
}

// leaseSent is lease, also saying, on failure, whether the script may have run (execSent).
func (st *Store) leaseSent(ctx context.Context, op, key string, code int, id string, limit int, ttl time.Duration) (_ []int64, maybeSent bool, _ error) {
	if st.closed.Load() {
		return nil, false, st.failed(ctx, op, key, cache.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, st.failed(ctx, op, key, fmt.Errorf("ratemonitor: redis store: %s on key %q: not sent: %w", op, key, err))
	}
	if err := st.gate(ctx); err != nil {
		return nil, false, st.failed(ctx, op, key, err)
	}
	now := int64(-1)
	if st.opts.Clock != nil {
		now = st.opts.Clock.Now().UnixMicro()
	}
	// ttl rounded up to whole µs: a lease never expires early.
	ttlMicros := int64((ttl + time.Microsecond - 1) / time.Microsecond)
	lk := st.LeaseKey(key)
	res, sent, err := st.execSent(ctx, op, key, leaseScript, []string{lk, lk + leaseTombMagic},
		[]any{code, now, id, limit, ttlMicros, st.opts.Slack.Microseconds()})
	if err != nil {
		return nil, sent, err
	}
	if len(res) != 4 {
		return nil, true, fmt.Errorf("ratemonitor: redis store: %s on key %q: unexpected reply %v", op, key, res)
	}
	if res[0] != 0 {
		res[0] = 5 // the code corruptions names for a lease set (state.go)
	}
	res, err = st.settled(key, res)
	return res, true, err
}

// AcquireLease implements cache.Leaser: one round trip, on Redis TIME, so every process
// sharing the server counts the same leases. A lease keeps its key's set alive for at least
// ttl + Options.Slack. Errors: cache.ErrInvalidLease's, cache.ErrClosed after Close, and the
// call's own failure as under Record. An AcquireLease that fails may still have run on the
// server (cut off by its context or the Timeout while the script was on the wire): the store
// then releases that lease by itself (only then: not after a failure before the script was
// written, such as a context already ended, a refused dial or a reply saying it did not run;
// one background worker per store, from a queue of at most 1024 such leases, a lease past that
// left to its expiry), in the background, retrying until the TTL has passed,
// and buries its id so that a script that runs only after the release takes nothing;
// Close stops those releases, leaving such a lease to its expiry.
func (st *Store) AcquireLease(ctx context.Context, key string, limit int, ttl time.Duration) (cache.Lease, error) {
	if err := storecheck.Lease(limit, ttl); err != nil {
		return cache.Lease{}, err
	}
	id := st.leaseID()
	r, sent, err := st.leaseSent(ctx, "acquire lease", key, 1, id, limit, ttl)
	if err != nil {
		if sent {
			st.releaseCutOff(key, id, ttl)
		}
		return cache.Lease{}, err
	}
	if r[0] != 1 {
		return cache.Lease{Held: int(r[1]), Wait: time.Duration(r[2]) * time.Microsecond}, nil
	}
	return cache.Lease{ID: id, Held: int(r[1])}, nil
}

// RenewLease implements cache.Leaser: one round trip. Errors are AcquireLease's.
func (st *Store) RenewLease(ctx context.Context, key, id string, ttl time.Duration) (bool, error) {
	if err := storecheck.Lease(1, ttl); err != nil {
		return false, err
	}
	if id == "" {
		return false, fmt.Errorf("%w: empty lease id", cache.ErrInvalidLease)
	}
	r, err := st.lease(ctx, "renew lease", key, 2, id, 1, ttl)
	if err != nil {
		return false, err
	}
	return r[0] == 1, nil
}

// ReleaseLease implements cache.Leaser: one round trip. Errors are AcquireLease's.
func (st *Store) ReleaseLease(ctx context.Context, key, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty lease id", cache.ErrInvalidLease)
	}
	_, err := st.lease(ctx, "release lease", key, 3, id, 1, time.Microsecond)
	return err
}

package cache

import (
	"context"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/storecheck"
)

// Leaser is implemented by stores that hold in-flight slots (ratemonitor.WithInFlight): at
// most limit leases per key at once, each with an expiry, so that a slot held by a process
// that crashed frees by itself once its lease's TTL has passed. The memory store (in this
// process) and the Redis store (shared by every process on the server) implement it; the
// SQLite and DynamoDB stores do not.
//
// Lease keys are a namespace of their own: a key's leases never touch its rate-limit state.
// A lease expires at instant acquired (or last renewed) + ttl, on the store's clock (Redis
// TIME on the Redis store), and counts while now < expiry: at exactly its expiry it is free.
type Leaser interface {
	// AcquireLease takes a slot of key, for ttl (> 0, whole microseconds are kept), when fewer
	// than limit (≥ 1) unexpired leases of key are held; otherwise it takes nothing and says
	// when the earliest held lease expires (Lease.Wait). It is one atomic step per key.
	AcquireLease(ctx context.Context, key string, limit int, ttl time.Duration) (Lease, error)
	// RenewLease moves the expiry of lease id of key to now + ttl. It reports false, and changes
	// nothing, when the lease is not held any more (it expired, or was released).
	RenewLease(ctx context.Context, key, id string, ttl time.Duration) (bool, error)
	// ReleaseLease gives lease id of key back. Releasing a lease that is not held is not an
	// error (it expired meanwhile).
	ReleaseLease(ctx context.Context, key, id string) error
}

// Lease is what Leaser.AcquireLease answers.
type Lease struct {
	// ID names the lease taken, for RenewLease and ReleaseLease; "" when none was (the key is full).
	ID string
	// Held is how many unexpired leases of key are held after the call, this one included.
	Held int
	// Wait, when no lease was taken, is how long until the earliest held lease expires
	// (> 0): the latest the slot can free without a Release. 0 when a lease was taken.
	Wait time.Duration
}

// Acquired reports whether a lease was taken.
func (l Lease) Acquired() bool { return l.ID != "" }

// ErrInvalidLease is wrapped when AcquireLease or RenewLease is asked for a limit below 1 or a TTL of
// less than a microsecond, or RenewLease or ReleaseLease for an empty lease id.
var ErrInvalidLease = storecheck.ErrInvalidLease

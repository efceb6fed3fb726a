// Package storecheck holds the argument checks every store of this repository applies, and the
// errors they wrap (cache.ErrInvalidCount and cache.ErrInvalidLease are these).
package storecheck

import (
	"errors"
	"fmt"
	"time"
)

// MaxCount is the most requests one Record or Release may carry: 2^31.
const MaxCount = 1 << 31

// ErrInvalidCount is cache.ErrInvalidCount.
var ErrInvalidCount = errors.New("ratemonitor: request count out of range")

// ErrInvalidLease is cache.ErrInvalidLease.
var ErrInvalidLease = errors.New("ratemonitor: invalid lease request")

// Count returns an error wrapping ErrInvalidCount unless 1 ≤ n ≤ MaxCount: the check every
// store applies to Record and Release.
func Count(n int) error {
	if n < 1 || n > MaxCount {
		return fmt.Errorf("%w: %d, want 1 to %d", ErrInvalidCount, n, MaxCount)
	}
	return nil
}

// Lease returns an error wrapping ErrInvalidLease unless limit ≥ 1 and ttl ≥ 1 µs: the check
// every Leaser applies to AcquireLease (RenewLease passes limit 1).
func Lease(limit int, ttl time.Duration) error {
	if limit < 1 || ttl < time.Microsecond {
		return fmt.Errorf("%w: limit %d (want at least 1), ttl %v (want at least 1µs)", ErrInvalidLease, limit, ttl)
	}
	return nil
}

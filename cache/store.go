// Package cache holds the Store interface, where rate-limit state lives, and the default
// in-process store over gocache and ristretto.
//
// A Store applies a strategy's operations to one key atomically: every rule of the key is read
// and written in one step, so concurrent callers never lose a count or share a slot.
package cache

import (
	"context"
	"errors"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// ErrClosed is returned by every operation on a closed store.
var ErrClosed = errors.New("ratemonitor: store is closed")

// ErrFull is wrapped when the memory store cannot admit a new key's state within its cost
// limit. Nothing was recorded; raise MemoryConfig.MaxCost or lower the number of live keys.
var ErrFull = errors.New("ratemonitor: memory store is full")

// Store keeps rate-limit state per key. Implementations are safe for concurrent use, and each
// method is atomic for its key across all rules of the strategy.
//
// now is the caller's instant; a store that has a clock shared by all its users (Redis TIME)
// uses that instead. A Store keeps one counter per (key, counter ID), so strategies that layer
// the same window on a key share its count.
type Store interface {
	// Record adds n requests at now under every rule of s, whatever the limits say
	// (monitoring).
	Record(ctx context.Context, s *strategy.Strategy, key string, now time.Time, n int) error
	// Reserve records a burst of n if it fits every rule of s at now, and otherwise records
	// nothing and returns how long until it fits. Burst errors are strategy.CheckBurst's.
	Reserve(ctx context.Context, s *strategy.Strategy, key string, now time.Time, n int) (strategy.Result, error)
	// Release takes back n requests that a Reserve at instant at recorded and the caller did
	// not use. at is the instant the reservation was made at (for a store with its own clock,
	// the one it reported in the Result).
	Release(ctx context.Context, s *strategy.Strategy, key string, at time.Time, n int) error
	// Peek returns usage per rule and the wait for a burst of n (n == 0: usage only) without
	// recording anything.
	Peek(ctx context.Context, s *strategy.Strategy, key string, now time.Time, n int) (strategy.Snapshot, error)
	// Close releases the store's resources; later calls return ErrClosed.
	Close() error
}

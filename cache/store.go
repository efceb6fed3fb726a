// Package cache holds the Store interface, where rate-limit state lives, and the default
// in-process store over gocache and ristretto.
//
// A Store applies a strategy's operations to one key atomically: every rule of the key is read
// and written in one step, so concurrent callers never lose a count or share a slot.
package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// ErrClosed is returned by every operation on a closed store.
var ErrClosed = errors.New("ratemonitor: store is closed")

// ErrFull is wrapped when the memory store cannot admit a new key's state within its cost
// limit, which happens only when every byte of it is held by keys at or over their limits.
// Nothing was recorded; raise MemoryConfig.MaxCost or lower the number of live keys.
var ErrFull = errors.New("ratemonitor: memory store is full")

// ErrInvalidCount is wrapped when Record or Release is asked for fewer than 1 or more than
// MaxCount requests.
var ErrInvalidCount = errors.New("ratemonitor: request count out of range")

// ErrContended is wrapped when a store that updates a key optimistically (read, then write if
// nobody wrote in between: the DynamoDB store) lost that race to other writers on every try it
// makes. Nothing was recorded: the operation was neither admitted nor refused. It is not an
// outage: the Transport and the middleware try again, with jittered backoff, until the
// request's context ends, and never send or serve a request uncounted because of it.
var ErrContended = errors.New("ratemonitor: store: too much contention on the key")

// MaxCount is the most requests one Record or Release may carry.
const MaxCount = 1 << 31

// Store keeps rate-limit state per key. Implementations are safe for concurrent use, and each
// method is atomic for its key across all rules of the strategy.
//
// The store decides the instant an operation happens at, from its clock, while it holds the
// key: so two callers can never apply their operations in the opposite order to their instants,
// and a store shared by many processes (Redis TIME) is the clock for all of them. A Store keeps
// one counter per (key, counter ID), so strategies that layer the same window on a key share
// its count.
type Store interface {
	// Record adds n requests (1 ≤ n ≤ MaxCount) under every rule of s, whatever the limits
	// say (monitoring).
	Record(ctx context.Context, s *engine.Strategy, key string, n int) error
	// Reserve records a burst of n if it fits every rule of s now, and otherwise records
	// nothing and returns how long until it fits. Burst errors are engine.Strategy.CheckBurst's.
	Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error)
	// Release takes back n requests that a Reserve recorded at instant at (its Result.At)
	// and the caller did not use.
	Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error
	// Peek returns usage per rule and the wait for a burst of n (n == 0: usage only) without
	// recording anything.
	Peek(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Snapshot, error)
	// Close releases the store's resources; later calls return ErrClosed.
	Close() error
}

// Syncer is implemented by stores that keep what upstreams say (ratemonitor.WithSync): a pause
// after a 429, and usage raised to the upstream's count. A store that implements it honours
// the pause in Reserve (nothing is granted until it ends) and in Peek (the wait for a burst is
// at least the rest of the pause; Snapshot.PausedUntil and Usage.Reported say what was
// reported), for every caller sharing the store.
type Syncer interface {
	// Sync applies u to key at the store's instant, atomically with the key's other
	// operations: see engine.Strategy.Sync. An invalid update returns an error wrapping
	// engine.ErrInvalidUpdate and changes nothing.
	Sync(ctx context.Context, s *engine.Strategy, key string, u engine.Update) error
}

// Admitter is implemented by stores that decide a server's requests (the middleware package)
// in one atomic step that also returns every rule's state for the response's RateLimit fields.
type Admitter interface {
	// Admit decides an attempt of n requests for key under s: see engine.Strategy.Admit.
	// Under the fixed window a refused attempt is counted too. Burst errors are
	// engine.Strategy.CheckBurst's.
	Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error)
}

// Validator is implemented by stores that cannot hold every strategy (the Redis store has a
// script per known algorithm, works in whole microseconds and bounds buckets per rule; the
// SQLite store wants counters that encode themselves). ratemonitor.New and middleware.New call
// it, so that such a strategy is refused when the Transport or Limiter is made, not on every
// request.
type Validator interface {
	Validate(s *engine.Strategy) error
}

// Contender is implemented by stores whose operations can fail with ErrContended when callers
// write one key at the same time. When Contends reports true, a Transport makes its own callers
// take turns per key for the store's writes, so that they do not fight over the key among
// themselves; stores that never contend (memory, Redis, SQLite) are called without that.
type Contender interface {
	Contends() bool
}

// Clocked is implemented by stores whose clock runs in this process (the memory store). A
// Transport over such a store sleeps on the same clock, so that its waits and the store's
// instants agree.
type Clocked interface {
	Clock() clock.Clock
}

// InProcess is implemented by stores whose state lives in this process's memory (cache.Memory):
// they cannot become unreachable, so a Transport's degraded mode (ratemonitor.Degrade) does
// not apply to them and their errors are handled as under SendNothing. A store without it
// (Redis, SQLite, DynamoDB) is taken to be shared, and can be. Being Clocked says nothing about
// this: the SQLite store keeps its clock in this process but its state in a file other
// processes write.
type InProcess interface {
	InProcess() bool
}

// Fleet is implemented by shared stores that know how many processes use them at once (the
// Redis store, by a heartbeat each Store value writes). Processes returns that number as last
// seen, at least 1 once known, and 0 when it is not known (yet). A Transport in degraded mode
// divides each limit among that many processes unless told a share (ratemonitor.WithDegraded).
type Fleet interface {
	Processes() int
}

// CheckCount returns an error wrapping ErrInvalidCount unless 1 ≤ n ≤ MaxCount: the check
// every Store applies to Record and Release.
func CheckCount(n int) error {
	if n < 1 || n > MaxCount {
		return fmt.Errorf("%w: %d, want 1 to %d", ErrInvalidCount, n, MaxCount)
	}
	return nil
}

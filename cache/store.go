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

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/internal/storeshare"
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
// 2^31 requests.
var ErrInvalidCount = storecheck.ErrInvalidCount

// ErrContended is wrapped when a store that updates a key optimistically (read, then write if
// nobody wrote in between: the DynamoDB store) lost that race to other writers on every try it
// makes. Nothing was recorded: the operation was neither admitted nor refused. It is not an
// outage: the Transport and the middleware try again, with jittered backoff, until the
// request's context ends, and never send or serve a request uncounted because of it.
var ErrContended = errors.New("ratemonitor: store: too much contention on the key")

// Store keeps rate-limit state per key. Implementations are safe for concurrent use, and each
// method is atomic for its key across all rules of the strategy.
//
// The store decides the instant an operation happens at, from its clock, while it holds the
// key: so two callers can never apply their operations in the opposite order to their instants,
// and a store shared by many processes (Redis TIME) is the clock for all of them. A Store keeps
// one counter per (key, counter ID), so strategies that layer the same window on a key share
// its count.
type Store interface {
	// Record adds n requests (1 ≤ n ≤ 2^31) under every rule of s, whatever the limits
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
	// PutLimits stores v, the limits a Transport knows for key (an opaque value), in place of
	// what was there, for ttl (0: no expiry), so that every Transport over the store reads it.
	PutLimits(ctx context.Context, key string, v []byte, ttl time.Duration) error
	// Limits returns the value PutLimits last stored for key, or nil when there is none (or
	// it expired).
	Limits(ctx context.Context, key string) ([]byte, error)
}

// Admitter is implemented by stores that decide a server's requests (the middleware package)
// in one atomic step that also returns every rule's state for the response's RateLimit fields.
type Admitter interface {
	// Admit decides an attempt of n requests for key under s: see engine.Strategy.Admit.
	// Under the fixed window a refused attempt is counted too. Burst errors are
	// engine.Strategy.CheckBurst's.
	Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error)
}

// Describer is implemented by stores that say what they are beyond the Store methods: what a
// Transport or middleware Limiter over them adapts to (Traits). A store without it is taken to
// have the zero Traits.
type Describer interface {
	Describe() Traits
}

// Traits is what a store says of itself (Describer). Its zero value, which a store without
// Describer is given, describes a store shared with other processes that holds every
// strategy, never contends, keeps no clock of this process and no Sharing.
type Traits struct {
	// Clock is the clock the store reads its instants from when that clock runs in this
	// process (the memory and SQLite stores): a Transport over the store sleeps on it, so that
	// its waits and the store's instants agree. nil: the Transport's own (WithClock).
	Clock clock.Clock
	// InProcess says the state lives in this process's memory (the memory store): it cannot
	// become unreachable, so a Transport's degraded mode (ratemonitor.Degrade) does not apply
	// and store errors are handled as under SendNothing. A Clock says nothing about this: the
	// SQLite store keeps its clock here but its state in a file other processes write.
	InProcess bool
	// Contends says operations can fail with ErrContended when callers write one key at once
	// (the DynamoDB store): a Transport's or Limiter's own callers then take turns per key.
	Contends bool
	// Namespace says where the state lives, such as "redis 127.0.0.1:6379 db 0 prefix rm:";
	// its first word names the store in a Transport's events. "" names it by its Go type.
	Namespace string
	// Processes, when set, returns how many processes use the store as last seen (the Redis
	// store's heartbeat), at least 1 once known and 0 until then. A Transport in degraded mode
	// divides each limit among them unless told a share (ratemonitor.WithDegraded).
	Processes func() int
	// Validate, when set, reports whether the store can hold a strategy (the Redis store has a
	// script per known algorithm; the SQLite and DynamoDB stores want counters that encode
	// themselves): ratemonitor.New and middleware.New call it, so that a strategy is refused
	// when the Transport or Limiter is made, not on every request. nil: every strategy.
	Validate func(*engine.Strategy) error
	// Sharing is the store value's Sharing. nil: the rules of Transports and Limiters over the
	// store are not checked (ErrCounterConflict), and a Transport over it marks every request.
	Sharing *Sharing
}

// Sharing is what the Transports and middleware Limiters over one store value keep in it: how
// many Transports use it, and which counters their rules count in. A Transport alone on its
// store sends each request as it is; once another shares the store, each request carries a
// mark (two allocations) so that a Transport further in over the same store counts it only
// where the outer one did not. The claims refuse rules that would split a count
// (ErrCounterConflict). A store holds one (the zero value is ready; do not copy it once used)
// and returns its address in Traits.Sharing. Nothing of it is process-wide: each store value
// is a store of its own to both, even when two values reach the same data.
type Sharing = storeshare.Sharing

// ErrCounterConflict is wrapped by ratemonitor.New and middleware.New when a strategy would
// count a limit in another counter than a strategy already used on the same store value: two
// rules of the same window (for the token bucket: the same window and limit) that differ in
// margin or granularity. Each would count only its own requests, so together they would let
// through up to twice the limit. Give both the same Margin and Granularity, or give them
// separate stores (for Redis, a prefix of their own).
var ErrCounterConflict = storeshare.ErrCounterConflict

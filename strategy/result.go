package strategy

import (
	"errors"
	"time"
)

// What a user reads back from a Transport or a middleware Limiter about a key, and the two
// errors a burst too large for the rules returns. They are written by the algorithms and
// stores (package strategy/engine), but users name them, so they live beside Rule.

// ErrInvalidBurst is returned for a burst below 1.
var ErrInvalidBurst = errors.New("burst must be at least 1")

// ErrBurstTooLarge is wrapped when a burst is larger than a rule's effective limit: such a
// burst can never fit, so it is refused instead of waiting forever.
var ErrBurstTooLarge = errors.New("burst exceeds limit")

// Usage is how much of one rule's allocation a key has used at an instant.
type Usage struct {
	Rule Rule
	// Used is the number of requests that count now. It may exceed the limit after
	// recording in monitoring mode.
	Used int
	// Remaining is Rule.EffectiveLimit() − Used, never below 0.
	Remaining int
	// Reported is the last remaining count the upstream gave for this rule's counter
	// (cache.Store.Sync), meaningful only when ReportedAt is not zero.
	Reported int
	// ReportedAt is the store's instant when Reported was given; zero when never.
	ReportedAt time.Time
}

// Snapshot is a read-only view of one key: usage per rule, in rule order, and the wait for the
// burst asked about (0 when the burst asked about is 0).
type Snapshot struct {
	Usage []Usage
	Wait  time.Duration
	// PausedUntil is the end of a pause the upstream asked for (cache.Store.Sync) when it has not
	// ended yet; zero otherwise.
	PausedUntil time.Time
}

// Decision is the answer to one admission (engine.Strategy.Admit): whether the attempt is admitted,
// and every rule's state after it, for a server's 429 and its RateLimit fields.
type Decision struct {
	// Allowed is true when the attempt fitted every rule.
	Allowed bool
	// RetryAfter is how long until an attempt of the same size would fit; 0 when Allowed.
	// Servers send it rounded up to whole seconds as Retry-After (RFC 9110 §10.2.3).
	RetryAfter time.Duration
	// At is the instant the decision was taken at (the later of the store's clock and the
	// latest instant the key has seen).
	At time.Time
	// Rules is one entry per rule, in the order the rules were given.
	Rules []RuleState
}

// RuleState is one rule's allocation after an admission.
type RuleState struct {
	Rule Rule
	// Used counts the attempts that count now, refused ones included under the fixed window;
	// it may exceed the limit.
	Used int
	// Remaining is Rule.EffectiveLimit() − Used, never below 0.
	Remaining int
	// Reset is how long until the rule's whole effective limit is available again (IETF t):
	// the end of the fixed window, the rolling window's last counted request leaving it, the
	// token bucket full again. 0 when nothing counts.
	Reset time.Duration
}

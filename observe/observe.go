// Package observe is the hook through which the Transport, the stores and the middleware
// report what they do: one interface, Observer, and one value type, Event.
//
// Every component takes an optional Observer (ratemonitor.WithObserver, middleware.WithObserver,
// the stores' Options or Config field Observer). A nil Observer costs one comparison per event
// site and nothing else: no Event is built. Observers are called synchronously on the goroutine
// that did the work (for the memory store's evictions, ristretto's goroutine or the caller's whose
// write needed the room, with the store's locks held), so they must be
// safe for concurrent use, quick, and must not call back into the component that called them.
// Package metrics (github.com/ratemonitor/ratemonitor/metrics) turns events into Prometheus
// metrics.
//
// The package imports only the standard library, so that every other package may import it.
package observe

import (
	"strconv"
	"strings"
	"time"
)

// Observer receives events. It must be safe for concurrent use and should return quickly.
type Observer interface {
	Observe(Event)
}

// Func adapts a function to an Observer.
type Func func(Event)

// Observe calls f(e).
func (f Func) Observe(e Event) { f(e) }

// Kind says what happened.
type Kind uint8

// The kinds of event, with the fields each one sets. Key is set on all but Degraded and
// Recovered (a Transport's whole store), StateLost for a restart or an eviction (a server's),
// and EvictedLive from sources that have none.
const (
	// Recorded: the Transport recorded N requests on Key (monitoring mode: every attempt; the
	// app key of WithAppRules too).
	Recorded Kind = iota + 1
	// Granted: a reserve of N on Key was granted (pacing, Transport.Reserve): the N requests
	// are recorded.
	Granted
	// Refused: a reserve of N on Key was refused; Wait is how long until it fits. The caller
	// then waits and asks again, so one paced request may be refused more than once.
	Refused
	// Waited: a caller of the Transport waited Wait in total on Key before its burst of N was
	// granted (pacing, Reserve) or fitted (Transport.Wait). Only waits longer than 0 are
	// reported.
	Waited
	// Paused: the upstream paused Key (a 429 or 503 with Retry-After, a used-up limit with a
	// reset; WithSync) until Until, on the Transport's clock.
	Paused
	// TooManyRequests: the upstream answered a request on Key with 429.
	TooManyRequests
	// StoreError: store Store failed operation Op ("record", "reserve", "admit", "release",
	// "peek", "sync") on Key with Err. Errors of the caller's own making (an invalid count or
	// burst, a context the caller ended) are not reported.
	StoreError
	// EvictedLive: the memory store evicted Key's state while it still counted (see
	// cache.MemoryConfig.OnEvictLive); its counts restart from zero.
	EvictedLive
	// Retry: store Store's conditional write on Key failed because another writer changed
	// the key (optimistic locking) and the operation Op starts again; N is the retry's number,
	// from 1. When the retries run out the operation fails with a StoreError.
	Retry
	// Admitted: the middleware admitted a request on Key; Rules holds every rule's usage
	// after the decision.
	Admitted
	// Rejected: the middleware refused a request on Key with 429; Wait is its Retry-After
	// (before rounding) and Rules every rule's usage.
	Rejected
	// SkewedDate: a response to a request on Key gave an HTTP-date Retry-After with a Date more
	// than headers.MaxDateSkew from the Transport's clock (WithSync), so the Retry-After was
	// measured from the Transport's clock instead. Wait is the skew, Date minus that clock:
	// negative when the Date is behind.
	SkewedDate
	// StateLost: store Store found that state it kept may be gone, so that counts restart
	// lower than they were: Op says how it knew ("restart": the server's run ID changed;
	// "eviction": the server evicted N keys, some of which may be the store's; "corrupt": a
	// key held a value the store could not read and was started afresh; "lease": a
	// Transport found the in-flight lease of a request still in flight gone from the store,
	// and took it again or, the key full, could not). Key is set when
	// one key is known; Err says what was seen, in words.
	StateLost
	// Degraded: the Transport could not reach its shared store Store (Err is the failure)
	// and paces on a local memory store at a share of each limit until the shared store
	// answers again (ratemonitor.WithDegraded).
	Degraded
	// Recovered: the shared store Store answers again after a Degraded event; Wait is how
	// long the Transport ran degraded. A Transport closed while degraded reports it too, with
	// Err cache.ErrClosed (the store may still be down), so that each Degraded has one end.
	Recovered
	// LimitChanged: a Transport made without rules learned a limit from the upstream's
	// answer, or was given one (Transport.SetMeter), or a limit it had changed. Key is the
	// meter's key ("" for a meter set for every key); Op says how ("learned", "set", or
	// "shared": read from the store, as another Transport learned or set it); Rules
	// holds the new rules (Used 0, Limit the quota), or one rule "inflight" whose Limit is the
	// requests allowed in progress at once.
	LimitChanged
)

var kindNames = [...]string{"", "recorded", "granted", "refused", "waited", "paused",
	"too_many_requests", "store_error", "evicted_live", "retry", "admitted", "rejected", "skewed_date",
	"state_lost", "degraded", "recovered", "limit_changed"}

// String returns the kind's name in snake case ("recorded", "store_error", …).
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing that happened. Which fields are set depends on Kind.
type Event struct {
	Kind  Kind
	Key   string        // the key (tenant, host, client) it happened on
	N     int           // requests recorded, reserved or waited for; a Retry's number
	Wait  time.Duration // Refused, Waited, Rejected; SkewedDate's skew; Recovered's time degraded
	Until time.Time     // Paused
	Store string        // "memory", "redis", "sqlite", "dynamodb" (StoreError, EvictedLive, Retry, StateLost, Degraded, Recovered)
	Op    string        // StoreError, Retry; StateLost's reason; LimitChanged's source
	Err   error         // StoreError, Degraded, Recovered at Close; StateLost's description
	Rules []RuleUsage   // Admitted, Rejected: one per rule, in rule order; LimitChanged: the new rules
}

// RuleUsage is one rule's allocation after a decision.
type RuleUsage struct {
	Rule  string // the rule as strategy.Rule.String gives it, such as "60/1m0s"
	Used  int    // requests that count now (may exceed Limit)
	Limit int    // the rule's effective limit (Limit − Headroom)
}

// String formats e on one line with the fields its kind sets, for logs and test tables:
// "refused key=k n=1 wait=10s".
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	if e.Store != "" {
		b.WriteString(" store=" + e.Store)
	}
	if e.Op != "" {
		b.WriteString(" op=" + e.Op)
	}
	b.WriteString(" key=" + e.Key)
	if e.N != 0 {
		b.WriteString(" n=" + strconv.Itoa(e.N))
	}
	if e.Wait != 0 {
		b.WriteString(" wait=" + e.Wait.String())
	}
	if !e.Until.IsZero() {
		b.WriteString(" until=" + e.Until.UTC().Format(time.RFC3339Nano))
	}
	for _, r := range e.Rules {
		b.WriteString(" " + r.Rule + ":" + strconv.Itoa(r.Used) + "/" + strconv.Itoa(r.Limit))
	}
	if e.Err != nil {
		b.WriteString(" err=" + e.Err.Error())
	}
	return b.String()
}

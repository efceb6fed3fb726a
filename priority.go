package ratemonitor

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Priority orders the requests and reservations waiting on one key of a Transport (pacing
// mode, Reserve, WithInFlight) and at its meters' keys (WithMeter, WithAppRules): a free turn
// goes to the waiter of the highest priority, and among waiters of one priority to the one that
// started waiting first. Any int8 is a priority; higher is served first. The zero value is
// PriorityNormal, the priority of a request whose context carries none, so a Transport whose
// requests carry none serves them in arrival order. No waiter is passed by more than 8
// waiters that started waiting after it, across every queue it waits in.
// See docs/pacing.md#serve-interactive-requests-first-priorities.
type Priority int8

// The named priorities. Values between and beyond them are valid too.
const (
	PriorityBatch       Priority = -1 // background work: served after the others
	PriorityNormal      Priority = 0  // the zero value and the default
	PriorityInteractive Priority = 1  // a user is waiting: served before the others
)

// maxOvertakes is the most waiters that started waiting on a key after a given waiter and get
// their turn before it (see Priority). When the longest-waiting waiter has been passed this
// many times, the next turn is its, whatever the priorities of the others.
const maxOvertakes = 8

// String returns "batch", "normal", "interactive", or "Priority(n)" for other values.
func (p Priority) String() string {
	switch p {
	case PriorityBatch:
		return "batch"
	case PriorityNormal:
		return "normal"
	case PriorityInteractive:
		return "interactive"
	}
	return fmt.Sprintf("Priority(%d)", int(p))
}

type priorityContext struct{}

// WithPriority returns a copy of ctx that gives the requests, Reserve and Wait calls carrying
// it priority p in the Transport's queues (see Priority).
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityContext{}, p)
}

// PriorityFrom returns the priority set by WithPriority on ctx, and PriorityNormal when none
// is set.
func PriorityFrom(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityContext{}).(Priority)
	return p
}

// pick returns the index in ws (waiters in arrival order, the head not among them) of the
// waiter whose turn comes next: the oldest when it has been passed maxOvertakes times, and
// otherwise the first of the highest priority. The oldest is always the most passed: whoever
// passes a waiter passes every older one still waiting too, so a waiter younger than the
// oldest is never passed beyond maxOvertakes either (the oldest goes before it first).
//
// A waiter that came from an earlier queue of its request (passes) starts with the passes it
// took there, so a younger waiter may have been passed more than an older one: the turn goes to
// the oldest of those passed maxOvertakes times, if any.
func pick(ws []*waiter) int {
	for i, w := range ws {
		if w.overtaken >= maxOvertakes {
			return i
		}
	}
	if len(ws) == 0 {
		return 0
	}
	best := 0
	for i, w := range ws[1:] {
		if w.prio > ws[best].prio {
			best = i + 1
		}
	}
	return best
}

// servedBefore returns how many requests the waiters that get their turn before w hold, if
// nobody else arrives: the head's and those pick would choose before w. ws is the queue in
// arrival order, head included, w last. It only reads ws; the copies it replays pick on are
// told from one another by their turn channels, which are unique.
func servedBefore(ws []*waiter, head, w *waiter) int {
	// One priority and nobody passed maxOvertakes times: pick takes them in arrival order. A
	// waiter passed that often (passes carried from its request's earlier queue) is taken out
	// of order even among waiters of one priority: replay then.
	ahead, mixed := 0, w.overtaken >= maxOvertakes
	for _, o := range ws[:len(ws)-1] {
		if !o.reserving.Load() { // a head asking the store: its n is there (checkAhead)
			ahead += o.n
		}
		mixed = mixed || (o != head && (o.prio != w.prio || o.overtaken >= maxOvertakes))
	}
	if !mixed {
		return ahead // arrival order, everyone before w (in O(len(ws)))
	}
	// Mixed: replay pick on a copy (O(len(ws)²), for the queues that need it).
	ahead = 0
	rest := make([]waiter, 0, len(ws))
	for _, o := range ws {
		if o == head {
			if !o.reserving.Load() {
				ahead += o.n
			}
			continue
		}
		rest = append(rest, waiter{n: o.n, prio: o.prio, overtaken: o.overtaken, turn: o.turn})
	}
	ptrs := make([]*waiter, len(rest))
	for i := range rest {
		ptrs[i] = &rest[i]
	}
	for len(ptrs) > 0 {
		i := pick(ptrs)
		if ptrs[i].turn == w.turn {
			return ahead
		}
		ahead += ptrs[i].n
		for _, o := range ptrs[:i] {
			o.overtaken++
		}
		ptrs = append(ptrs[:i], ptrs[i+1:]...)
	}
	return ahead
}

// passes carries the passes one request took in a queue (waiter.overtaken) into the next
// queue it waits in, so that maxOvertakes bounds them across all (see Priority). One request
// joins its queues one after another; n is atomic all the same, for a base RoundTripper that
// hands the request's context to several goroutines (Transports stacked under it).
type passes struct{ n atomic.Int64 }

type passesContext struct{}

// withPasses returns ctx carrying a passes for one request: ctx itself when it carries one.
// Every RoundTrip, Reserve and Wait gets its own (never the caller's context, which may be
// shared by many calls).
func withPasses(ctx context.Context) context.Context {
	if _, ok := ctx.Value(passesContext{}).(*passes); ok {
		return ctx
	}
	return context.WithValue(ctx, passesContext{}, &passes{})
}

// passesFrom returns ctx's passes, or nil.
func passesFrom(ctx context.Context) *passes {
	p, _ := ctx.Value(passesContext{}).(*passes)
	return p
}

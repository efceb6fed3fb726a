package ratemonitor

import "testing"

// TestServedBeforeCarriedPassesOnePriority: in a queue of one priority, a newcomer that carries
// MaxOvertakes passes from its request's earlier queue (passes) gets the next turn after the
// head's, before the waiters that arrived earlier: the deadline check counts the head's 1 only,
// not the 1 + 2 + 4 of arrival order (which would refuse, as a *DeadlineError, a wait that
// ends in time). A waiter before it carrying them too keeps its place ahead.
func TestServedBeforeCarriedPassesOnePriority(t *testing.T) {
	mk := func(n, overtaken int) *waiter {
		return &waiter{n: n, prio: PriorityNormal, overtaken: overtaken, turn: make(chan struct{})}
	}
	head, a, b := mk(1, 0), mk(2, 0), mk(4, 0)
	w := mk(8, MaxOvertakes)
	if got := servedBefore([]*waiter{head, a, b, w}, head, w); got != 1 {
		t.Errorf("served before a newcomer passed MaxOvertakes times already: %d requests, want 1 (the head's)", got)
	}
	a.overtaken = MaxOvertakes
	if got := servedBefore([]*waiter{head, a, b, w}, head, w); got != 3 {
		t.Errorf("served before it with an older waiter passed as often: %d requests, want 3 (head 1, that waiter 2)", got)
	}
	// nobody passed MaxOvertakes times: arrival order
	a.overtaken, w.overtaken = 0, MaxOvertakes-1
	if got := servedBefore([]*waiter{head, a, b, w}, head, w); got != 7 {
		t.Errorf("one priority, none passed MaxOvertakes times: %d requests before the newcomer, want 7", got)
	}
}

package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestPriorityDeadlineCountsOnlyTheWaitersServedFirst: the deadline check counts the waiters that
// would get their turn first: an interactive newcomer only waits for the head, so it fits a
// deadline a FIFO place would miss, and a batch newcomer waits for everyone.
func TestPriorityDeadlineCountsOnlyTheWaitersServedFirst(t *testing.T) {
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 4, Window: time.Minute}), WithPacing(), WithClock(clk))
	ctx := context.Background()
	for i := range 4 { // slots free at t0+60s, +70s, +80s, +90s
		if i > 0 {
			clk.Advance(10 * time.Second)
		}
		if _, err := tr.Reserve(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	// Now t0+30s: 1 slot takes 30 s, 2 take 40 s, 3 take 50 s, 4 take 60 s.
	h := newPrioQueue(t, tr, clk, "k", onK)
	h.add(ctx, "H", PriorityNormal)
	h.add(ctx, "B1", PriorityBatch)
	h.add(ctx, "B2", PriorityBatch)
	dl := func(d time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return c
	}
	// Behind H alone: 2 slots, 40 s. In arrival order it would be 4 slots, 60 s. (The deadlines
	// are on the real clock, the waits on the manual one: 55 s leaves a wide margin to the 40 s.)
	h.add(dl(55*time.Second), "I", PriorityInteractive)
	var de *DeadlineError
	// A normal newcomer goes after H and I: 3 slots, 50 s.
	if _, err := tr.Reserve(WithPriority(dl(45*time.Second), PriorityNormal), "k", 1); !errors.As(err, &de) || de.Wait != 50*time.Second {
		t.Errorf("normal newcomer: %v, want a DeadlineError with a wait of 50s", err)
	}
	// A batch newcomer goes after all four: 5 slots, more than the limit of 4: the first goes in
	// 30 s and the fifth a window after it, 90 s (pacing_bound.go).
	if _, err := tr.Reserve(WithPriority(dl(55*time.Second), PriorityBatch), "k", 1); !errors.As(err, &de) || de.Wait != 90*time.Second {
		t.Errorf("batch newcomer: %v, want a DeadlineError with a wait of 90s", err)
	}
	if n := tr.Queued("k"); n != 4 {
		t.Errorf("%d queued, want 4: the refused newcomers must leave", n)
	}
	if got, want := h.run(), "H I B1 B2"; got != want {
		t.Errorf("served %s, want %s", got, want)
	}
}

// TestServedBeforeCountsTheWaitersServedFirst: servedBefore, what the deadline check of a
// queued request adds up, counts the requests of the waiters that will have their turn before
// the newcomer (the queue's last), the head's included unless it is asking the store (its
// requests are in the store then, or about to be: checkAhead), and changes nothing in the queue:
//   - the aging rule: a batch waiter passed maxOvertakes-1 times goes before a normal newcomer
//     once one more interactive waiter has passed it;
//   - one priority behind a head of another: arrival order, everyone before the newcomer;
//   - in a queue of one priority, a newcomer that carries maxOvertakes passes from its
//     request's earlier queue gets the next turn after the head's, before the waiters that
//     arrived earlier: the check counts the head's 1 only, not the 1 + 2 + 4 of arrival order
//     (which would refuse, as a *DeadlineError, a wait that ends in time); a waiter before it
//     carrying as many keeps its place ahead.
func TestServedBeforeCountsTheWaitersServedFirst(t *testing.T) {
	type w struct {
		n         int
		prio      Priority
		overtaken int
	}
	const (
		batch       = PriorityBatch
		normal      = PriorityNormal
		interactive = PriorityInteractive
	)
	for _, c := range []struct {
		name      string
		queue     []w // the head first, the newcomer last
		reserving bool
		want      int
		who       string
	}{
		{"head asking the store, one priority", []w{{1, normal, 0}, {2, normal, 0}, {4, normal, 0}, {8, normal, 0}}, true,
			6, "2 and 4: the head's 1 is in the store already, or about to be"},
		{"head asking the store, mixed", []w{{1, normal, 0}, {2, batch, maxOvertakes - 1}, {4, interactive, 0}, {8, normal, 0}}, true,
			6, "interactive 4, aged batch 2"},
		{"aged batch waiter", []w{{1, normal, 0}, {2, batch, maxOvertakes - 1}, {4, interactive, 0}, {8, normal, 0}},
			false, 7, "head 1, interactive 4, aged batch 2"},
		{"batch waiter not aged yet", []w{{1, normal, 0}, {2, batch, maxOvertakes - 2}, {4, interactive, 0}, {8, normal, 0}},
			false, 5, "head 1, interactive 4"},
		{"one priority behind a head of another", []w{{1, normal, 0}, {2, batch, maxOvertakes - 2}, {2, batch, 0}, {16, batch, 0}},
			false, 5, "head 1, batch 2 and 2"},
		{"newcomer carrying maxOvertakes passes", []w{{1, normal, 0}, {2, normal, 0}, {4, normal, 0}, {8, normal, maxOvertakes}},
			false, 1, "the head's"},
		{"older waiter carrying as many", []w{{1, normal, 0}, {2, normal, maxOvertakes}, {4, normal, 0}, {8, normal, maxOvertakes}},
			false, 3, "head 1, that waiter 2"},
		{"none passed maxOvertakes times", []w{{1, normal, 0}, {2, normal, 0}, {4, normal, 0}, {8, normal, maxOvertakes - 1}},
			false, 7, "arrival order"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := make([]*waiter, len(c.queue))
			for i, x := range c.queue {
				q[i] = &waiter{n: x.n, prio: x.prio, overtaken: x.overtaken, turn: make(chan struct{})}
			}
			q[0].reserving.Store(c.reserving)
			if got := servedBefore(q, q[0], q[len(q)-1]); got != c.want {
				t.Errorf("%s: %d requests served before the newcomer, want %d (%s)", c.name, got, c.want, c.who)
			}
			for i, x := range c.queue {
				if q[i].overtaken != x.overtaken {
					t.Error("servedBefore changed the queue")
				}
			}
		})
	}
}

// TestCheckAheadRechecksWhenAHeadAsksTheStore: a waiter's deadline check that refuses is run
// again, without the head, when the head started asking the store since the check read the
// queue (its grant may be in what the check read from the store: counted twice, it refused
// requests that fit); a refusal read on a queue that did not move stands.
func TestCheckAheadRechecksWhenAHeadAsksTheStore(t *testing.T) {
	full := errors.New("full")
	for _, c := range []struct {
		name      string
		n         []int // the queue's waiters before the newcomer, the head first
		headAsks  bool  // the head starts asking the store during the first check
		fitsUpTo  int   // the check passes when ahead is at most this
		want      error
		wantCalls []int // the aheads the check was given
	}{
		{"head asks: nothing ahead any more", []int{83}, true, 0, nil, []int{83}},
		{"head asks: checked again without it", []int{83, 83}, true, 83, nil, []int{166, 83}},
		{"a queue that did not move", []int{83, 83}, false, 83, full, []int{166}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := &queue{}
			for _, n := range c.n {
				q.waiters = append(q.waiters, &waiter{n: n, turn: make(chan struct{})})
			}
			w := &waiter{n: 83, turn: make(chan struct{})}
			q.waiters = append(q.waiters, w)
			q.head = q.waiters[0]
			var calls []int
			err := checkAhead(&pacerShard{}, q, w, servedBefore(q.waiters, q.head, w), func(ahead int) error {
				calls = append(calls, ahead)
				if len(calls) == 1 && c.headAsks {
					q.head.reserving.Store(true)
				}
				if ahead > c.fitsUpTo {
					return full
				}
				return nil
			})
			if err != c.want || fmt.Sprint(calls) != fmt.Sprint(c.wantCalls) {
				t.Errorf("checkAhead: %v after checks with %v ahead, want %v after %v", err, calls, c.want, c.wantCalls)
			}
		})
	}
}

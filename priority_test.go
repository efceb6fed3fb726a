package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// prioQueue drives Reserve calls queued on one key of a paced Transport in virtual time: each
// is started only once the one before is in the queue, so arrival order is the order of add,
// and the clock moves only when every unfinished caller is queued and the head is asleep.
type prioQueue struct {
	t      *testing.T
	tr     *Transport
	clk    *clock.Manual
	qkey   string                   // the pacer queue watched (a key, or appQueue+app key)
	key    func(name string) string // the key a caller reserves on
	wg     sync.WaitGroup
	active atomic.Int64
	mu     sync.Mutex
	order  []string
	errs   map[string]error
}

func newPrioQueue(t *testing.T, tr *Transport, clk *clock.Manual, qkey string, key func(string) string) *prioQueue {
	return &prioQueue{t: t, tr: tr, clk: clk, qkey: qkey, key: key, errs: map[string]error{}}
}

// add starts a Reserve of 1 named name at priority p on ctx and returns once it is queued.
func (h *prioQueue) add(ctx context.Context, name string, p Priority) {
	h.t.Helper()
	before := h.tr.Queued(h.qkey)
	h.active.Add(1)
	h.wg.Go(func() {
		defer h.active.Add(-1)
		_, err := h.tr.Reserve(WithPriority(ctx, p), h.key(name), 1)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil {
			h.errs[name] = err
			return
		}
		h.order = append(h.order, name)
	})
	h.waitFor(func() bool { return h.tr.Queued(h.qkey) == before+1 })
}

func (h *prioQueue) waitFor(cond func() bool) {
	h.t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(limit) {
			h.t.Fatal("timed out waiting for the queue")
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// run moves the clock until every caller is done and returns the order they were granted in.
func (h *prioQueue) run() string {
	h.t.Helper()
	limit := time.Now().Add(30 * time.Second)
	for h.active.Load() > 0 && time.Now().Before(limit) {
		if int64(h.tr.Queued(h.qkey)) == h.active.Load() && h.clk.Sleepers() == 1 {
			at, _ := h.clk.Next()
			h.clk.Set(at)
		}
		time.Sleep(20 * time.Microsecond)
	}
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.order, " ")
}

// paced1per10s returns a paced Transport whose key "k" holds 1 request per 10 s, already taken.
func paced1per10s(t *testing.T) (*Transport, *clock.Manual) {
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 1, Window: 10 * time.Second}), WithPacing(), WithClock(clk))
	if _, err := tr.Reserve(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	return tr, clk
}

func onK(string) string { return "k" }

// TestPriorityOrder: the head keeps its turn; then interactive, normal and batch waiters are
// served in that order, each priority in arrival order, one per 10 s.
func TestPriorityOrder(t *testing.T) {
	tr, clk := paced1per10s(t)
	h := newPrioQueue(t, tr, clk, "k", onK)
	ctx := context.Background()
	h.add(ctx, "H", PriorityBatch) // the head: asleep until t0+10s, it keeps its turn
	for _, w := range []struct {
		name string
		p    Priority
	}{{"B1", PriorityBatch}, {"N1", PriorityNormal}, {"I1", PriorityInteractive}, {"B2", PriorityBatch},
		{"N2", PriorityNormal}, {"I2", PriorityInteractive}, {"X", 100}, {"B3", PriorityBatch}} {
		h.add(ctx, w.name, w.p)
	}
	if got, want := h.run(), "H X I1 I2 N1 N2 B1 B2 B3"; got != want {
		t.Errorf("served %s, want %s", got, want)
	}
	if got := clk.Now().Sub(t0); got != 90*time.Second {
		t.Errorf("9 waiters at 1 per 10 s took %v, want 90s", got)
	}
}

// TestPriorityFIFOWithin: waiters of one priority, whatever it is, are served in arrival
// order, as waiters without a priority always were.
func TestPriorityFIFOWithin(t *testing.T) {
	for _, p := range []Priority{PriorityBatch, PriorityNormal, PriorityInteractive} {
		tr, clk := paced1per10s(t)
		h := newPrioQueue(t, tr, clk, "k", onK)
		for i := range 6 {
			h.add(context.Background(), fmt.Sprint(i), p)
		}
		if got := h.run(); got != "0 1 2 3 4 5" {
			t.Errorf("%v: served %s, want 0 1 2 3 4 5", p, got)
		}
	}
}

// TestPriorityStarvationBound: batch waiters are passed by exactly MaxOvertakes interactive
// waiters that arrived after them, then served; the younger batch waiter is not passed beyond
// the bound either, and the rest of the interactive waiters follow.
func TestPriorityStarvationBound(t *testing.T) {
	if MaxOvertakes != 8 {
		t.Fatalf("MaxOvertakes %d: the documented bound is 8", MaxOvertakes)
	}
	tr, clk := paced1per10s(t)
	h := newPrioQueue(t, tr, clk, "k", onK)
	ctx := context.Background()
	h.add(ctx, "H", PriorityNormal)
	h.add(ctx, "B1", PriorityBatch)
	h.add(ctx, "B2", PriorityBatch)
	for i := 1; i <= 11; i++ {
		h.add(ctx, fmt.Sprintf("I%d", i), PriorityInteractive)
	}
	want := "H I1 I2 I3 I4 I5 I6 I7 I8 B1 B2 I9 I10 I11"
	if got := h.run(); got != want {
		t.Errorf("served %s, want %s", got, want)
	}
}

// TestPriorityCancel: waiters of each priority, and the head, that give up leave the queue
// consistent: the count drops by one each time, the others keep their order, the next head
// takes the turn, and nothing is left queued or asleep.
func TestPriorityCancel(t *testing.T) {
	tr, clk := paced1per10s(t)
	h := newPrioQueue(t, tr, clk, "k", onK)
	ctx := context.Background()
	cancels := map[string]context.CancelFunc{}
	for _, w := range []struct {
		name string
		p    Priority
	}{{"H", PriorityNormal}, {"B1", PriorityBatch}, {"B2", PriorityBatch}, {"N1", PriorityNormal},
		{"I1", PriorityInteractive}, {"N2", PriorityNormal}, {"I2", PriorityInteractive}} {
		c, cancel := context.WithCancel(ctx)
		defer cancel()
		cancels[w.name] = cancel
		h.add(c, w.name, w.p)
	}
	h.waitFor(func() bool { return clk.Sleepers() == 1 })
	for i, name := range []string{"I1", "N1", "B1", "H"} {
		cancels[name]()
		h.waitFor(func() bool { return tr.Queued("k") == 6-i && h.active.Load() == int64(6-i) })
	}
	h.waitFor(func() bool { return clk.Sleepers() == 1 }) // I2 is the head now, asleep
	if got, want := h.run(), "I2 N2 B2"; got != want {
		t.Errorf("served %s, want %s", got, want)
	}
	for _, name := range []string{"I1", "N1", "B1", "H"} {
		if !errors.Is(h.errs[name], context.Canceled) {
			t.Errorf("%s: %v, want context.Canceled", name, h.errs[name])
		}
	}
	if got := clk.Now().Sub(t0); got != 30*time.Second {
		t.Errorf("3 waiters at 1 per 10 s took %v, want 30s", got)
	}
	if n, s := tr.Queued("k"), clk.Sleepers(); n != 0 || s != 0 {
		t.Errorf("left behind: %d queued, %d asleep", n, s)
	}
	if u := usedOf(t, tr, "k")[0]; u != 1 {
		t.Errorf("used %d, want 1 (B2's slot; the cancelled ones took none)", u)
	}
}

// TestPriorityDeadline: the deadline check counts the waiters that would get their turn first:
// an interactive newcomer only waits for the head, so it fits a deadline a FIFO place would
// miss, and a batch newcomer waits for everyone.
func TestPriorityDeadline(t *testing.T) {
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
	// Behind H alone: 2 slots, 40 s. In arrival order it would be 4 slots, 60 s.
	h.add(dl(45*time.Second), "I", PriorityInteractive)
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

// TestServedBeforeAging: the deadline check's count follows the aging rule too: a batch waiter
// passed MaxOvertakes-1 times goes before a normal newcomer once one more interactive waiter has
// passed it.
func TestServedBeforeAging(t *testing.T) {
	mk := func(n int, p Priority, overtaken int) *waiter {
		return &waiter{n: n, prio: p, overtaken: overtaken, turn: make(chan struct{})}
	}
	head := mk(1, PriorityNormal, 0)
	b := mk(2, PriorityBatch, MaxOvertakes-1)
	i := mk(4, PriorityInteractive, 0)
	n := mk(8, PriorityNormal, 0)
	if got := servedBefore([]*waiter{head, b, i, n}, head, n); got != 7 {
		t.Errorf("served before the newcomer: %d requests, want 7 (head 1, interactive 4, aged batch 2)", got)
	}
	b.overtaken = MaxOvertakes - 2
	if got := servedBefore([]*waiter{head, b, i, n}, head, n); got != 5 {
		t.Errorf("served before the newcomer: %d requests, want 5 (head 1, interactive 4)", got)
	}
	if b.overtaken != MaxOvertakes-2 || i.overtaken != 0 {
		t.Error("servedBefore changed the queue")
	}
	// One priority behind a head of another: arrival order, everyone before the newcomer.
	b2, b3 := mk(2, PriorityBatch, 0), mk(16, PriorityBatch, 0)
	if got := servedBefore([]*waiter{head, b, b2, b3}, head, b3); got != 5 {
		t.Errorf("one priority: %d requests before the newcomer, want 5 (head 1, batch 2 and 2)", got)
	}
}

// TestPriorityAppQueue: at the app key (WithAppRules), waiters of different keys take turns by
// priority too, each priority in the order it reached the app key.
func TestPriorityAppQueue(t *testing.T) {
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 1, Window: 10 * time.Second}),
		WithPacing(), WithClock(clk))
	if _, err := tr.Reserve(context.Background(), "first", 1); err != nil {
		t.Fatal(err)
	}
	h := newPrioQueue(t, tr, clk, appQueue+"app", func(name string) string { return "key-" + name })
	ctx := context.Background()
	for _, w := range []struct {
		name string
		p    Priority
	}{{"H", PriorityBatch}, {"B1", PriorityBatch}, {"N1", PriorityNormal}, {"I1", PriorityInteractive},
		{"N2", PriorityNormal}, {"I2", PriorityInteractive}} {
		h.add(ctx, w.name, w.p)
	}
	if got, want := h.run(), "H I1 I2 N1 N2 B1"; got != want {
		t.Errorf("served at the app key %s, want %s", got, want)
	}
}

// TestPriorityRace: many goroutines of three priorities reserve on one key, some giving up
// midway; every one that does not give up is served, no waiter is ever passed beyond
// MaxOvertakes, and the queue ends empty.
func TestPriorityRace(t *testing.T) {
	const goroutines, each = 48, 5
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 5, Window: time.Second, Granularity: 10 * time.Millisecond}),
		WithPacing(), WithClock(clk))
	quit, stop := context.WithCancel(context.Background())
	defer stop()
	var active, stayed, gaveUp, quitDone atomic.Int64
	var wg sync.WaitGroup
	active.Store(goroutines)
	for g := range goroutines {
		ctx := WithPriority(context.Background(), Priority(g%3-1))
		if g%4 == 0 {
			ctx = WithPriority(quit, Priority(g%3-1))
		}
		wg.Go(func() {
			defer active.Add(-1)
			for range each {
				_, err := tr.Reserve(ctx, "k", 1)
				switch {
				case err == nil && g%4 != 0:
					stayed.Add(1)
				case err == nil:
				case errors.Is(err, context.Canceled) && g%4 == 0:
					gaveUp.Add(1)
					return
				default:
					t.Error(err)
					return
				}
			}
			if g%4 == 0 {
				quitDone.Add(1)
			}
		})
	}
	most := 0
	limit := time.Now().Add(30 * time.Second)
	for active.Load() > 0 && time.Now().Before(limit) {
		if int64(tr.Queued("k")) == active.Load() && clk.Sleepers() == 1 {
			most = max(most, tr.mostOvertaken("k"))
			if clk.Now().Sub(t0) >= 5*time.Second {
				stop()
			}
			at, _ := clk.Next()
			clk.Set(at)
		}
		time.Sleep(20 * time.Microsecond)
	}
	wg.Wait()
	if active.Load() != 0 {
		t.Fatal("did not finish in 30 s of real time")
	}
	t.Logf("most passed: %d; granted to the goroutines that stay: %d; gave up: %d", most, stayed.Load(), gaveUp.Load())
	if most > MaxOvertakes {
		t.Errorf("a waiter was passed %d times, more than MaxOvertakes", most)
	}
	if got, want := stayed.Load(), int64(goroutines/4*3*each); got != want {
		t.Errorf("the goroutines that never give up were granted %d, want %d", got, want)
	}
	if got := gaveUp.Load() + quitDone.Load(); got != goroutines/4 {
		t.Errorf("%d of the goroutines that may give up gave up or finished, want %d", got, goroutines/4)
	}
	if n, s := tr.Queued("k"), clk.Sleepers(); n != 0 || s != 0 {
		t.Errorf("left behind: %d queued, %d asleep", n, s)
	}
}

// mostOvertaken returns how often the most passed waiter on key's queue has been passed.
func (t *Transport) mostOvertaken(key string) int {
	sh := t.pacer.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	most := 0
	if q := sh.queues[key]; q != nil {
		for _, w := range q.waiters {
			most = max(most, w.overtaken)
		}
	}
	return most
}

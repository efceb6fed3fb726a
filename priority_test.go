package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	limit := time.Now().Add(waitLimit)
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

// TestPriorityServesInteractiveThenNormalThenBatch: the head keeps its turn; then interactive,
// normal and batch waiters are served in that order, each priority in arrival order, one per 10 s.
func TestPriorityServesInteractiveThenNormalThenBatch(t *testing.T) {
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

// TestPriorityKeepsArrivalOrderWithinAPriority: waiters of one priority, whatever it is, are served
// in arrival order, as waiters without a priority always were.
func TestPriorityKeepsArrivalOrderWithinAPriority(t *testing.T) {
	for _, p := range []Priority{PriorityBatch, PriorityNormal, PriorityInteractive} {
		t.Run(p.String(), func(t *testing.T) {
			tr, clk := paced1per10s(t)
			h := newPrioQueue(t, tr, clk, "k", onK)
			for i := range 6 {
				h.add(context.Background(), fmt.Sprint(i), p)
			}
			if got := h.run(); got != "0 1 2 3 4 5" {
				t.Errorf("%v: served %s, want 0 1 2 3 4 5", p, got)
			}
		})
	}
}

// TestPriorityPassesABatchWaiterAtMostMaxOvertakesTimes: batch waiters are passed by exactly
// maxOvertakes interactive waiters that arrived after them, then served; the younger batch waiter
// is not passed beyond the bound either, and the rest of the interactive waiters follow.
func TestPriorityPassesABatchWaiterAtMostMaxOvertakesTimes(t *testing.T) {
	if maxOvertakes != 8 {
		t.Fatalf("maxOvertakes %d: the documented bound is 8", maxOvertakes)
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

// TestPriorityCancelLeavesTheQueueConsistent: waiters of each priority, and the head, that give up
// leave the queue consistent: the count drops by one each time, the others keep their order, the
// next head takes the turn, and nothing is left queued or asleep.
func TestPriorityCancelLeavesTheQueueConsistent(t *testing.T) {
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

// TestPriorityOrdersTheAppKeysQueue: at the app key (WithAppRules), waiters of different keys take
// turns by priority too, each priority in the order it reached the app key.
func TestPriorityOrdersTheAppKeysQueue(t *testing.T) {
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 1, Window: 10 * time.Second}),
		WithPacing(), WithClock(clk))
	if _, err := tr.Reserve(context.Background(), "first", 1); err != nil {
		t.Fatal(err)
	}
	h := newPrioQueue(t, tr, clk, meterQueue+"app\x00app", func(name string) string { return "key-" + name })
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

// TestPriorityUnderRaceServesEveryoneWithinTheBound: many goroutines of three priorities reserve on
// one key, some giving up midway; every one that does not give up is served, no waiter is ever
// passed beyond maxOvertakes, and the queue ends empty.
func TestPriorityUnderRaceServesEveryoneWithinTheBound(t *testing.T) {
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
	if most > maxOvertakes {
		t.Errorf("a waiter was passed %d times, more than maxOvertakes", most)
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
	sh := t.pace.queues.shard(key)
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

// TestPriorityOvertakesBoundAcrossInFlightQueue: Priority's doc promises "under a steady stream
// of interactive requests a batch waiter at the front of the queue gets the turn after at most
// maxOvertakes of them". With WithInFlight a paced request waits in two queues of its key, the
// in-flight one and then the rate one: the bound holds over both (the passes of the first
// queue are carried into the second), so a batch request B, queued right behind one normal
// request, is sent after at most maxOvertakes interactive requests that arrived after it (2 ·
// maxOvertakes before issue 15's fix, the bound counted afresh in each queue). Virtual time: 1
// request per second, WithInFlight(3).
func TestPriorityOvertakesBoundAcrossInFlightQueue(t *testing.T) {
	clk := clock.NewManual(t0)
	var mu sync.Mutex
	var order []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.Header.Get("X-Name"))
		mu.Unlock()
	}))
	defer up.Close()
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 1, Window: time.Second}), WithPacing(), WithClock(clk),
		WithInFlight(3), WithKeyFunc(func(*http.Request) string { return "k" }))
	if _, err := tr.Reserve(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	const iq = inflightQueue + "k"
	var done atomic.Int64
	var wg sync.WaitGroup
	total := 0
	start := func(name string, p Priority, cond func() bool) {
		total++
		wg.Go(func() {
			defer done.Add(1)
			req, _ := http.NewRequestWithContext(WithPriority(context.Background(), p), http.MethodGet, up.URL, nil)
			req.Header.Set("X-Name", name)
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Error(name, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
		limit := time.Now().Add(waitLimit)
		for !cond() {
			if time.Now().After(limit) {
				t.Fatalf("%s never queued (rate %d, in-flight %d)", name, tr.queued("k"), tr.Queued(iq))
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	start("H1", PriorityNormal, func() bool { return tr.queued("k") == 1 })
	start("H2", PriorityNormal, func() bool { return tr.queued("k") == 2 })
	start("H3", PriorityNormal, func() bool { return tr.queued("k") == 3 })
	start("X", PriorityNormal, func() bool { return tr.Queued(iq) == 1 })
	start("B", PriorityBatch, func() bool { return tr.Queued(iq) == 2 })
	for i := 1; i <= 20; i++ {
		start(fmt.Sprintf("I%d", i), PriorityInteractive, func() bool { return tr.Queued(iq) == 2+i })
	}
	limit := time.Now().Add(time.Minute) // it takes a fraction of a second: this only ends a hang
	for done.Load() < int64(total) && time.Now().Before(limit) {
		want := 0
		if tr.queued("k") > 0 {
			want++
		}
		if tr.Queued(iq) > 0 {
			want++
		}
		if tr.InFlight("k") > 0 {
			want++ // the lease renewal loop
		}
		if int(done.Load())+tr.queued("k")+tr.Queued(iq) == total && clk.Sleepers() == want && want > 0 {
			if at, ok := clk.Next(); ok {
				clk.Set(at)
			}
		}
		time.Sleep(20 * time.Microsecond)
	}
	if done.Load() < int64(total) {
		t.Fatalf("not done: %d of %d", done.Load(), total)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	passed := 0
	for _, n := range order {
		if n == "B" {
			break
		}
		if strings.HasPrefix(n, "I") {
			passed++
		}
	}
	t.Logf("order: %s (passed %d)", strings.Join(order, " "), passed)
	if passed > maxOvertakes {
		t.Errorf("B (batch) was sent after %d interactive requests that arrived after it, want at most maxOvertakes (%d): %s", passed, maxOvertakes, strings.Join(order, " "))
	}
}

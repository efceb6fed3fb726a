package ratemonitor

// The tests of this file come from the adversarial review (rev2) of issue 15: each comment
// describes the defect the reviewer found, as it was before its fix; the test asserts the
// fixed behaviour.

import (
	"context"
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

// TestPriorityOvertakesBoundAcrossInFlightQueue: Priority's doc promises "under a steady stream of
// interactive requests a batch waiter at the front of the queue gets the turn after at most
// MaxOvertakes of them". With WithInFlight a paced request waits in two queues of its key, the
// in-flight one and then the rate one, and the bound is counted afresh in each: a batch
// request B, queued right behind one normal request, is sent after 2·MaxOvertakes interactive
// requests that arrived after it. Virtual time: 1 request per second, WithInFlight(3).
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
		limit := time.Now().Add(3 * time.Second)
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
	limit := time.Now().Add(4 * time.Second)
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
	if passed > MaxOvertakes {
		t.Errorf("B (batch) was sent after %d interactive requests that arrived after it, want at most MaxOvertakes (%d): %s", passed, MaxOvertakes, strings.Join(order, " "))
	}
}

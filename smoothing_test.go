package ratemonitor

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/smoothing"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// inWindow returns, for each send i, how many sends lie in [sends[i], sends[i]+w): the W-long
// windows that start at a send are the fullest ones, so the largest of these is the most any
// W-long window holds.
func inWindow(sends []time.Time, w time.Duration) []int {
	out := make([]int, len(sends))
	j := 0
	for i := range sends {
		for j < len(sends) && sends[j].Before(sends[i].Add(w)) {
			j++
		}
		out[i] = j - i
	}
	return out
}

// batchFigures is what one batch of sequential requests looked like to the strict upstream.
type batchFigures struct {
	sends      []time.Time
	atOnce     int           // sends at the first instant (from idle)
	maxWindow  int           // the most sends any W-long window held
	steady     [2]int        // least and most sends in the W-long windows that start after 2W
	took       time.Duration // from the first send to the last
	used       int           // AllocationUsed of the rule after the last send
	violations int           // requests the strict upstream refused (429)
}

// runBatch sends n requests one after the other through a paced Transport (smoothed or not)
// over the memory store, on a simulated clock (clock.Manual with Auto: a wait moves the clock,
// nothing sleeps), and measures them against the strict upstream.
func runBatch(tb testing.TB, rule strategy.Rule, smooth bool, n int) batchFigures {
	tb.Helper()
	clk := clock.NewManual(t0)
	clk.Auto = true
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	defer mem.Close()
	return runBatchOn(tb, clk, mem, rule, smooth, n)
}

// runBatchOn is runBatch over store st, whose clock is clk.
func runBatchOn(tb testing.TB, clk *clock.Manual, st cache.Store, rule strategy.Rule, smooth bool, n int) batchFigures {
	tb.Helper()
	up := &upstreamtest.Strict{Clock: clk, Rules: []strategy.Rule{rule}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	opts := []Option{WithRules(rule), WithStore(st), WithPacing()}
	if traitsOf(st).Clock == nil {
		opts = append(opts, WithClock(clk))
	}
	if smooth {
		opts = append(opts, WithSmoothing())
	}
	tr, err := New(srv.Client().Transport, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	for range n {
		resp, err := c.Get(srv.URL)
		if err != nil {
			tb.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var f batchFigures
	arrivals, _, violations := up.Seen()
	f.sends, f.violations = append(f.sends, arrivals...), violations
	if len(f.sends) != n || f.violations != 0 {
		tb.Fatalf("upstream accepted %d requests and refused %d, want %d and 0", len(f.sends), f.violations, n)
	}
	w := rule.EffectiveWindow()
	f.steady = [2]int{n, 0}
	for i, k := range inWindow(f.sends, w) {
		if f.sends[i].Equal(f.sends[0]) {
			f.atOnce++
		}
		f.maxWindow = max(f.maxWindow, k)
		if !f.sends[i].Before(f.sends[0].Add(2*w)) && !f.sends[i].Add(w).After(f.sends[n-1]) {
			f.steady[0], f.steady[1] = min(f.steady[0], k), max(f.steady[1], k)
		}
	}
	f.took = f.sends[n-1].Sub(f.sends[0])
	u, err := tr.AllocationUsed(context.Background(), srv.Listener.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	f.used = u[0].Used
	return f
}

// TestSmoothedPacerLeavesHalfTheWindowFree asserts the smoothed pacer's four figures for 60 per
// minute (b = 30, T = 60 s / 31 rounded up to 1.935484 s) against a strict rolling-window upstream,
// and the plain pacer's beside them, for a batch of 1000 (the README's table): from idle 30 go at
// once; once settled every window holds exactly 31 (about half the limit); no window ever holds
// more than 60 and the upstream refuses nothing; the batch ends exactly (1000 − 30)·T = 1877.41948
// s after its first send, against the plain pacer's 960 s: 2.02 × its time after the first window
// (half the throughput is the price of half the window left free).
func TestSmoothedPacerLeavesHalfTheWindowFree(t *testing.T) {
	const n = 1000
	T := smoothing.Interval(minute)
	if T != 1935484*time.Microsecond || smoothing.Burst(minute) != 30 {
		t.Fatalf("interval %v, burst %d; want 1.935484s and 30", T, smoothing.Burst(minute))
	}
	sm := runBatch(t, minute, true, n)
	plain := runBatch(t, minute, false, n)
	if sm.atOnce != 30 || !sm.sends[30].Equal(t0.Add(T)) {
		t.Errorf("smoothed: %d at once, the next at +%v; want 30, then +%v", sm.atOnce, sm.sends[30].Sub(t0), T)
	}
	if sm.steady != [2]int{31, 31} || sm.used != 31 {
		t.Errorf("smoothed: windows after 2W held %d to %d, usage at the end %d; want 31 each", sm.steady[0], sm.steady[1], sm.used)
	}
	if sm.maxWindow != 60 || plain.maxWindow != 60 {
		t.Errorf("most in one window: smoothed %d, plain %d; want 60 (the limit, never more)", sm.maxWindow, plain.maxWindow)
	}
	if want := (n - 30) * T; sm.took != want || want != 1877419480*time.Microsecond {
		t.Errorf("smoothed batch took %v, want (n − b)·T = %v", sm.took, want)
	}
	if plain.atOnce != 60 || plain.took != 16*time.Minute {
		t.Errorf("plain: %d at once, batch took %v; want 60 and 16m0s", plain.atOnce, plain.took)
	}
	if r := (sm.took - time.Minute).Seconds() / (plain.took - time.Minute).Seconds(); math.Round(r*100) != 202 {
		t.Errorf("after the first window the smoothed batch took %.4f × the plain one's time, want 2.02", r)
	}
}

// TestSmoothedBurstAboveBRefusedAndCancelGivesBack: a burst above b is refused at once; a cancelled
// reservation gives the GCRA's slots back, so the next burst goes without waiting.
func TestSmoothedBurstAboveBRefusedAndCancelGivesBack(t *testing.T) {
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tr := newTransport(t, nil, WithRules(minute), WithStore(mem), WithPacing(), WithSmoothing())
	ctx := context.Background()
	if _, err := tr.Reserve(ctx, "k", 31); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Fatalf("Reserve(31) = %v, want ErrBurstTooLarge", err)
	}
	r, err := tr.Reserve(ctx, "k", 30)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := tr.WaitTime(ctx, "k", 1); d != smoothing.Interval(minute) {
		t.Fatalf("after 30: WaitTime(1) = %v, want one interval", d)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := tr.WaitTime(ctx, "k", 30); d != 0 {
		t.Fatalf("after Cancel: WaitTime(30) = %v, want 0", d)
	}
	if u, _ := tr.AllocationUsed(ctx, "k"); u[0].Used != 0 {
		t.Fatalf("after Cancel: used %d, want 0", u[0].Used)
	}
}

// BenchmarkSmoothedPacer runs a batch of 1000 requests at 60 per minute through the smoothed
// and the plain pacer in simulated time against the strict upstream, and reports the smoothed
// pacer's figures: sends at once from idle (burst), the fewest and most sends in a window once
// settled (steady_min, steady_max), the most any window held (max_window, never above 60), the
// batch's duration in simulated seconds for both (smooth_s, plain_s) and their ratio after the
// first window (after_first_ratio).
func BenchmarkSmoothedPacer(b *testing.B) {
	const n = 1000
	var sm, plain batchFigures
	for range b.N {
		sm = runBatch(b, minute, true, n)
		plain = runBatch(b, minute, false, n)
	}
	w := minute.EffectiveWindow()
	b.ReportMetric(float64(sm.atOnce), "burst")
	b.ReportMetric(float64(sm.steady[0]), "steady_min")
	b.ReportMetric(float64(sm.steady[1]), "steady_max")
	b.ReportMetric(float64(max(sm.maxWindow, plain.maxWindow)), "max_window")
	b.ReportMetric(sm.took.Seconds(), "smooth_s")
	b.ReportMetric(plain.took.Seconds(), "plain_s")
	b.ReportMetric((sm.took-w).Seconds()/(plain.took-w).Seconds(), "after_first_ratio")
}

// TestSmoothingLeavesAppRules: WithSmoothing smooths the key's rules, not the app key's.
func TestSmoothingLeavesAppRules(t *testing.T) {
	tr := newTransport(t, nil, WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 100, Window: time.Minute}), WithSmoothing())
	if !tr.strat.Smoothing() || tr.meters[0].strat.Smoothing() {
		t.Fatalf("key rules smoothed %v, app rules smoothed %v; want true, false", tr.strat.Smoothing(), tr.meters[0].strat.Smoothing())
	}
}

// TestSmoothingNeedsRollingWindow: New refuses WithSmoothing over a fixed window, naming the
// option.
func TestSmoothingNeedsRollingWindow(t *testing.T) {
	fw, err := fixedwindow.New(minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(nil, WithStrategy(fw), WithSmoothing())
	if !errors.Is(err, engine.ErrNotSmoothable) || !strings.Contains(err.Error(), "WithSmoothing") {
		t.Fatalf("New = %v, want an error naming WithSmoothing and wrapping ErrNotSmoothable", err)
	}
}

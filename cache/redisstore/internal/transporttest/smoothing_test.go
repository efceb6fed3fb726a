package transporttest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// batch is what one batch of sequential requests looked like to the strict upstream.
type batch struct {
	sends     []time.Time
	atOnce    int // sends at the first instant (from idle)
	maxWindow int // the most sends any W-long window held
	used      int // AllocationUsed of the rule after the last send
}

// runBatch sends n requests one after the other through a smoothed, paced Transport over
// store st, whose clock is clk (clock.Manual with Auto: a wait moves the clock, nothing
// sleeps), and measures them against the strict upstream, which must refuse none.
func runBatch(t *testing.T, clk *clock.Manual, st cache.Store, rule strategy.Rule, n int) batch {
	t.Helper()
	up := &upstreamtest.Strict{Clock: clk, Rules: []strategy.Rule{rule}}
	srv := httptest.NewServer(up)
	defer srv.Close()
	opts := []ratemonitor.Option{ratemonitor.WithRules(rule), ratemonitor.WithStore(st), ratemonitor.WithPacing(), ratemonitor.WithSmoothing()}
	if d, ok := st.(cache.Describer); !ok || d.Describe().Clock == nil {
		opts = append(opts, ratemonitor.WithClock(clk))
	}
	tr, err := ratemonitor.New(srv.Client().Transport, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	for range n {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var b batch
	arrivals, _, violations := up.Seen()
	b.sends = append(b.sends, arrivals...)
	if len(b.sends) != n || violations != 0 {
		t.Fatalf("upstream accepted %d requests and refused %d, want %d and 0", len(b.sends), violations, n)
	}
	w := rule.EffectiveWindow()
	for i, s := range b.sends {
		if s.Equal(b.sends[0]) {
			b.atOnce++
		}
		k := 0 // sends in [s, s+w): the windows that start at a send are the fullest ones
		for _, later := range b.sends[i:] {
			if later.Before(s.Add(w)) {
				k++
			}
		}
		b.maxWindow = max(b.maxWindow, k)
	}
	u, err := tr.AllocationUsed(context.Background(), srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b.used = u[0].Used
	return b
}

// TestSmoothedPacerSendsAsOverMemory: a smoothed batch of 200 at 60 a minute over the Redis store (its
// script's GCRA, on the test's clock in place of Redis TIME) is sent at exactly the instants
// the memory store gives (the core's TestSmoothedPacerLeavesHalfTheWindowFree asserts those).
func TestSmoothedPacerSendsAsOverMemory(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	clk.Auto = true
	red := newStore(t, srv, redisstore.Options{Clock: clk, Prefix: "smooth-" + t.Name()})
	const n = 200
	got := runBatch(t, clk, red, minute, n)

	memClk := clock.NewManual(t0)
	memClk.Auto = true
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: memClk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	want := runBatch(t, memClk, mem, minute, n)
	for i := range want.sends {
		if !got.sends[i].Equal(want.sends[i]) {
			t.Fatalf("send %d at +%v over Redis, +%v over memory", i, got.sends[i].Sub(t0), want.sends[i].Sub(t0))
		}
	}
	if got.used != 31 || got.atOnce != 30 || got.maxWindow != 60 {
		t.Errorf("over Redis: used %d, %d at once, at most %d in a window; want 31, 30, 60", got.used, got.atOnce, got.maxWindow)
	}
}

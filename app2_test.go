package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// A request queued behind a head that waits for the app key is refused at once when the app's
// wait passes its deadline.
func TestQueuedDeadlineSeesApp(t *testing.T) {
	tr, up, clk := appSetup(t, strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	if err := tr.store.Record(ctx, tr.app.strat, "app", 10); err != nil { // app full for 60 s
		t.Fatal(err)
	}
	head := make(chan error, 1)
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	go func() { head <- doKey(tr, hctx, "k") }()
	waitSleepers(t, clk, 1) // the head sleeps on the app's 60 s
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := doKey(tr, dctx, "k") // needs ≥ 60 s of the manual clock: must fail at once
	took := time.Since(start)
	var de *DeadlineError
	if !errors.As(err, &de) || took > 100*time.Millisecond {
		t.Errorf("queued request behind an app wait of 60s with a 300ms deadline: err %v (DeadlineError %v) after %v; want a *DeadlineError at once", err, de != nil, took)
	}
	hcancel()
	<-head
	_ = up
}

// Under SendUncounted a request whose key's store fails is sent and still counted on the app key,
// paced or not.
func TestSendUncountedCountsApp(t *testing.T) {
	for _, paced := range []bool{false, true} {
		clk := clock.NewManual(t0)
		m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		b := &clockBase{clk: clk}
		opts := []Option{WithStore(failOn{m, "k"}), WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 1, Window: time.Minute}), WithLogger(discard)}
		if paced {
			// SendUncounted by name: paced Transports default to Degrade.
			opts = append(opts, WithPacing(), WithStoreErrorPolicy(SendUncounted))
		}
		tr := newTransport(t, b, opts...)
		for range 3 {
			if err := doKey(tr, context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
		}
		snap, _ := m.Peek(context.Background(), tr.app.strat, "app", 0)
		if snap.Usage[0].Used != 3 {
			t.Errorf("paced %v: 3 requests sent, the healthy app key counts %d (app limit 1/min, upstream saw %d in a minute)", paced, snap.Usage[0].Used, b.maxInWindow(time.Minute))
		}
	}
}

var _ = http.MethodGet

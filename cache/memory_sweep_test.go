package cache

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestReportedOutlivesOtherStrategy: a day rule's figure reported by Sync is shown by
// Peek while it is less than a window old. A later operation under another strategy (a minute
// rule, stacked Transports on one key) must not shorten how long the sweep keeps the entry.
func TestReportedOutlivesOtherStrategy(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{Clock: clk})
	day := mustStrategy(t, strategy.Rule{Limit: 5000, Window: 24 * time.Hour})
	minute := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	if err := m.Sync(ctx, day, "k", engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 4000, Used: 0}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Peek(ctx, minute, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	m.sweepAll()
	snap, err := m.Peek(ctx, day, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Usage[0].Reported; got != 4000 {
		t.Fatalf("10 min after a day rule's report: Reported = %d, want 4000 (the entry was swept: %+v)", got, snap.Usage[0])
	}
}

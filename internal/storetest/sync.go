package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// SyncStore is the part of a cache.Store and cache.Syncer that Sync needs (this package cannot
// import cache, whose own tests use it).
type SyncStore interface {
	Peeker
	Record(ctx context.Context, s *engine.Strategy, key string, n int) error
	Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error)
	Sync(ctx context.Context, s *engine.Strategy, key string, u engine.Update) error
}

// Sync checks a Syncer's exact answers on a manual clock that the store reads its instants
// from: raising, never lowering, the rule named, pausing, and refusing a bad update.
func Sync(t *testing.T, st SyncStore, clk *clock.Manual) {
	ctx := context.Background()
	t0 := clk.Now()
	at := func(d time.Duration) { clk.Set(t0.Add(d)) }
	// Xero's tenant limits: a minute rule and a day rule (granularity 10 s).
	s := Strategy(t, strategy.Rule{Limit: 60, Window: time.Minute},
		strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	peek := func(key string, n int) strategy.Snapshot {
		t.Helper()
		snap, err := st.Peek(ctx, s, key, n)
		must(err)
		return snap
	}

	must(st.Record(ctx, s, "k", 10))
	// The upstream counts 40 used in the minute (20 remaining): we count 10, so we rise to 40.
	must(st.Sync(ctx, s, "k", engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 20, Used: 40}}}))
	snap := peek("k", 0)
	if u := snap.Usage; u[0].Used != 40 || u[0].Remaining != 20 || u[0].Reported != 20 || !u[0].ReportedAt.Equal(t0) || u[1].Used != 10 || !u[1].ReportedAt.IsZero() {
		t.Fatalf("after raising the minute rule to 40: %+v", u)
	}
	// A figure below our count never lowers it, but is kept as reported.
	at(time.Second)
	must(st.Sync(ctx, s, "k", engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 50, Used: 10}}}))
	if u := peek("k", 0).Usage[0]; u.Used != 40 || u.Reported != 50 || !u.ReportedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("a lower upstream count lowered ours or was not kept: %+v", u)
	}
	// The day rule is raised on its own: the minute rule does not move.
	must(st.Sync(ctx, s, "k", engine.Update{Reports: []engine.Report{{Rule: 1, Remaining: 0, Used: 5000}}}))
	if u := peek("k", 0).Usage; u[0].Used != 40 || u[1].Used != 5000 || u[1].Remaining != 0 {
		t.Fatalf("raising the day rule: %+v", u)
	}
	// The 30 raised at t0 and the 4960 raised at 1 s stop counting a window after them.
	at(time.Minute)
	if u := peek("k", 0).Usage; u[0].Used != 0 || u[1].Used != 5000 {
		t.Fatalf("at 60 s: %+v", u)
	}

	// A pause holds every reservation until it ends, and never shortens.
	p := "p"
	at(2 * time.Minute)
	must(st.Sync(ctx, s, p, engine.Update{Pause: 30 * time.Second}))
	must(st.Sync(ctx, s, p, engine.Update{Pause: 5 * time.Second}))
	res, err := st.Reserve(ctx, s, p, 1)
	must(err)
	if res.Allowed || res.Wait != 30*time.Second {
		t.Fatalf("reserve during a 30 s pause: %+v", res)
	}
	if snap := peek(p, 1); snap.Wait != 30*time.Second || !snap.PausedUntil.Equal(t0.Add(150*time.Second)) {
		t.Fatalf("peek during the pause: wait %v until %v", snap.Wait, snap.PausedUntil)
	}
	if snap := peek(p, 0); snap.Wait != 0 || snap.Usage[0].Used != 0 {
		t.Fatalf("usage-only peek during the pause: %+v", snap)
	}
	// Monitoring still records during a pause.
	must(st.Record(ctx, s, p, 60))
	at(2*time.Minute + 29*time.Second)
	if snap := peek(p, 1); snap.Wait != 31*time.Second {
		t.Fatalf("pause ending before the minute rule frees a slot: wait %v, want 31s", snap.Wait)
	}
	at(3*time.Minute + time.Second)
	if snap := peek(p, 1); snap.Wait != 0 || !snap.PausedUntil.IsZero() {
		t.Fatalf("after the pause and the window: %+v", snap)
	}
	res, err = st.Reserve(ctx, s, p, 1)
	must(err)
	if !res.Allowed {
		t.Fatalf("reserve after the pause: %+v", res)
	}

	// A reported figure is shown for a window after it was given, then no more; the longest
	// pause a store takes is kept whole.
	at(3*time.Minute + 30*time.Second)
	must(st.Sync(ctx, s, "old", engine.Update{Pause: strategy.MaxWindow, Reports: []engine.Report{{Rule: 0, Remaining: 60, Used: 0}}}))
	at(4*time.Minute + 30*time.Second - time.Microsecond)
	if snap := peek("old", 1); snap.Usage[0].Reported != 60 || !snap.Usage[0].ReportedAt.Equal(t0.Add(210*time.Second)) ||
		!snap.PausedUntil.Equal(t0.Add(210*time.Second+strategy.MaxWindow)) {
		t.Fatalf("a figure just under a window old, or the longest pause: %+v", snap)
	}
	at(4*time.Minute + 30*time.Second)
	if u := peek("old", 0).Usage[0]; u.Reported != 0 || !u.ReportedAt.IsZero() {
		t.Fatalf("a figure a window old is still shown: %+v", u)
	}

	// A raise with a reset is dated so that it stops counting when the upstream frees it: 50
	// raised at 5 min with a reset of 20 s count until 5 min 20 s, not for a whole minute.
	at(5 * time.Minute)
	must(st.Sync(ctx, s, "r", engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 10, Used: 50, Reset: 20 * time.Second}}}))
	if snap := peek("r", 11); snap.Usage[0].Used != 50 || snap.Wait != 20*time.Second {
		t.Fatalf("raise with a 20 s reset: used %d, wait for 11 %v, want 50 and 20s", snap.Usage[0].Used, snap.Wait)
	}
	if u := peek("r", 0).Usage[0]; !u.ReportedAt.Equal(t0.Add(5 * time.Minute)) {
		t.Fatalf("reported at %v, want t0+5m", u.ReportedAt)
	}
	at(5*time.Minute + 20*time.Second - time.Nanosecond)
	if u := peek("r", 0).Usage[0]; u.Used != 50 {
		t.Fatalf("raised usage stopped counting before its reset: %+v", u)
	}
	at(5*time.Minute + 20*time.Second)
	if u := peek("r", 0).Usage[0]; u.Used != 0 {
		t.Fatalf("raised usage still counts at its reset: %+v", u)
	}
	// A reset as long as the window or longer is a raise at the instant itself.
	must(st.Sync(ctx, s, "r2", engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 0, Used: 60, Reset: time.Hour}}}))
	if snap := peek("r2", 1); snap.Wait != time.Minute {
		t.Fatalf("raise with a reset past the window: wait %v, want 1m", snap.Wait)
	}

	// A bad update is refused whole.
	for _, u := range []engine.Update{
		{Pause: -time.Second},
		{Reports: []engine.Report{{Rule: 0, Remaining: 1, Used: 59}, {Rule: 2, Used: 1}}},
		{Reports: []engine.Report{{Rule: 0, Remaining: -1, Used: 1}}},
		{Reports: []engine.Report{{Rule: 0, Used: 1 << 32}}},
		{Reports: []engine.Report{{Rule: 0, Used: 1, Reset: -time.Second}}},
		{Pause: strategy.MaxWindow + 1},
		{Reports: []engine.Report{{Rule: 0, Used: 1, Reset: strategy.MaxWindow + 1}}},
	} {
		if err := st.Sync(ctx, s, "bad", u); !errors.Is(err, engine.ErrInvalidUpdate) {
			t.Fatalf("Sync(%+v) = %v, want ErrInvalidUpdate", u, err)
		}
	}
	if u := peek("bad", 0).Usage[0]; u.Used != 0 || !u.ReportedAt.IsZero() {
		t.Fatalf("a refused update changed state: %+v", u)
	}
}

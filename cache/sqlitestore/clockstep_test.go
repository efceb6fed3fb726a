package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestClockStepKeepsCountsAndWaits: issue 13, defect 4, on a SQLite file whose clock is stepped (as
// the default wall clock can be): the shared suite, all three strategies.
func TestClockStepKeepsCountsAndWaits(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(time.Unix(1_800_000_000, 0))}
	st, _ := open(t, Options{Clock: clk, PruneEvery: -1})
	storetest.ClockStep(t, st, clk)
}

// TestFixedWindowCountCarriesAfterStepBack: the fixed window's table had no fresh limit to give
// after a step back, yet admitted one: 10 admitted at 10:00:10, the clock stepped back 1 h, and 10
// more were admitted at once in the window of 09:00. Now the count carries into the new clock's
// current window, and the rows from before the step are gone.
func TestFixedWindowCountCarriesAfterStepBack(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2027, 1, 15, 10, 0, 10, 0, time.UTC)
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	st, _ := open(t, Options{Clock: clk, PruneEvery: -1})
	s := must(fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Minute}))
	for i := range 10 {
		if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("admit %d: %+v %v", i+1, d, err)
		}
	}
	clk.Step(-time.Hour)
	d, err := st.Admit(ctx, s, "k", 1)
	if err != nil || d.Allowed || d.RetryAfter != 50*time.Second || d.Rules[0].Used != 11 {
		t.Fatalf("admit after the step: %+v %v; want refused, 11 used, retry after 50s", d, err)
	}
	if res, err := st.Reserve(ctx, s, "k", 1); err != nil || res.Allowed || res.Wait != 50*time.Second {
		t.Errorf("reserve after the step: %+v %v; want refused, wait 50s", res, err)
	}
	var rows int
	var start string
	var count int64
	if err := st.DB().QueryRow(`SELECT count(*), max(window_start), max(count) FROM rate_limit_windows`).Scan(&rows, &start, &count); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || start != "2027-01-15T09:00:00Z" || count != 11 {
		t.Errorf("table: %d rows, latest %s with %d; want 1 row, 2027-01-15T09:00:00Z with 11", rows, start, count)
	}
	clk.Advance(50 * time.Second)
	if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed || d.Rules[0].Used != 1 {
		t.Errorf("admit when the new clock's window ends: %+v %v; want allowed, 1 used", d, err)
	}
}

// TestFixedWindowSkewCountsInLatestWindow: a write whose clock reads 0.5 s behind the key's latest
// window, across a window boundary (a process whose clock lags another's by half a second), counts
// in the key's latest window. Before, it went to the window that had already ended there: never
// counted.
func TestFixedWindowSkewCountsInLatestWindow(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2027, 1, 15, 10, 1, 0, 200_000_000, time.UTC)
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	st, _ := open(t, Options{Clock: clk, PruneEvery: -1})
	s := must(fixedwindow.New(strategy.Rule{Limit: 2, Window: time.Minute}))
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Step(-500 * time.Millisecond) // 10:00:59.7
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	// Full: the window of 10:01 ends 60.3 s after 10:00:59.7, the instant asked at.
	if res, err := st.Reserve(ctx, s, "k", 1); err != nil || res.Allowed || res.Wait != 60300*time.Millisecond {
		t.Errorf("reserve 0.5 s behind: %+v %v; want refused, wait 1m0.3s", res, err)
	}
	clk.Step(500 * time.Millisecond)
	if u := storetest.Used(t, st, s, "k"); u[0] != 2 {
		t.Errorf("used at 10:01:00.2 = %d, want 2", u[0])
	}
}

package sqlitestore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestPruneUsesIndexes: both prune searches are index searches, not table scans, so a prune
// with nothing to delete costs little however many rows the tables hold.
func TestPruneUsesIndexes(t *testing.T) {
	st, _ := open(t, Options{})
	for _, q := range []string{
		`EXPLAIN QUERY PLAN SELECT rowid FROM rate_limit_windows WHERE unixepoch(window_start) + 2 * CAST(key AS INTEGER) <= 1 LIMIT 5000`,
		`EXPLAIN QUERY PLAN SELECT rowid FROM rate_limit_state WHERE expires_at <= 1 LIMIT 5000`,
	} {
		var id, parent, unused int
		var detail string
		if err := st.DB().QueryRow(q).Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		if len(detail) < 6 || detail[:6] != "SEARCH" {
			t.Errorf("%s\nplan %q, want an index SEARCH", q, detail)
		}
	}
}

// TestPruneInBatches: PruneExpired deletes everything old, batch after batch; a sampled prune
// deletes one batch.
func TestPruneInBatches(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	st, _ := open(t, Options{Clock: clk, PruneEvery: -1})
	tx, err := st.DB().Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12_000 {
		if _, err := tx.Exec(`INSERT INTO rate_limit_windows VALUES (?, '2026-11-30T20:00:00Z', 1)`, "60s|k"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(2 * time.Minute))
	if n, more, err := st.pruneOnce(context.Background()); n != 5000 || !more || err != nil {
		t.Errorf("one batch: %d, more %v, %v; want 5000, true", n, more, err)
	}
	if n, err := st.PruneExpired(context.Background()); n != 7000 || err != nil {
		t.Errorf("the rest: %d, %v; want 7000", n, err)
	}
}

// TestPruneDeletesEndedWindowsAndIdleStates: windows that started two window lengths ago or more
// go, newer ones stay, whatever their length; states in which nothing counts go.
func TestPruneDeletesEndedWindowsAndIdleStates(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	st, _ := open(t, Options{Clock: clk, PruneEvery: -1})
	ctx := context.Background()
	minute := must(fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Minute}))
	hour := must(fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Hour}))
	rw := must(rollingwindow.New(strategy.Rule{Limit: 10, Window: 10 * time.Second}))
	for _, m := range []int{0, 1, 2, 3} { // minute windows at 20:00, 20:01, 20:02, 20:03
		clk.Set(t0.Add(time.Duration(m) * time.Minute))
		st.Record(ctx, minute, "a", 1)
		st.Record(ctx, hour, "a", 1)
	}
	st.Record(ctx, rw, "a", 1) // at 20:03, counts until 20:03:10
	clk.Set(t0.Add(3*time.Minute + 30*time.Second))
	n, err := st.PruneExpired(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 20:03:30 − 2 min = 20:01:30: the windows of 20:00 and 20:01 go; 20:02 and 20:03 stay
	// (20:02 ended only 30 s ago), the hour stays, and the rolling window's state has expired.
	want := "3600s|a 2026-11-30T20:00:00Z 4\n60s|a 2026-11-30T20:02:00Z 1\n60s|a 2026-11-30T20:03:00Z 1\n"
	if got := dump(t, st); n != 3 || got != want {
		t.Errorf("pruned %d rows, left:\n%s\nwant 3 pruned, left:\n%s", n, got, want)
	}
	var states int
	st.DB().QueryRow(`SELECT count(*) FROM rate_limit_state`).Scan(&states)
	if states != 0 {
		t.Errorf("%d states left, want 0", states)
	}
	clk.Set(t0.Add(2 * time.Hour))
	if n, _ := st.PruneExpired(ctx); n != 3 {
		t.Errorf("two hours later pruned %d, want 3", n)
	}
}

// TestPruneSampledOnEveryPruneEveryWrites: the store prunes on its own on one write in PruneEvery.
func TestPruneSampledOnEveryPruneEveryWrites(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	st, _ := open(t, Options{Clock: clk, PruneEvery: 3})
	s := must(fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Second}))
	ctx := context.Background()
	for i := range 2 {
		clk.Set(t0.Add(time.Duration(i) * time.Second))
		st.Admit(ctx, s, "a", 1)
	}
	clk.Set(t0.Add(10 * time.Second))
	st.Admit(ctx, s, "a", 1) // the third write prunes the two old windows
	if got, want := dump(t, st), "1s|a 2026-11-30T20:00:10Z 1\n"; got != want {
		t.Errorf("rows after the third write:\n%s\nwant:\n%s", got, want)
	}
}

// TestPruneKeepsOddKeysUntilWindowsEnd: user keys full of digits, 's|', signs, spaces, exponents
// and NULs; a 1 s rule next to a 1 h rule and a 10-year rule. A prune one second before each row's
// start + 2W deletes nothing of it; every count survives until its window has ended.
func TestPruneKeepsOddKeysUntilWindowsEnd(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	st, _ := open(t, Options{Clock: clk, PruneEvery: 1})
	ctx := context.Background()
	s := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Second}, strategy.Rule{Limit: 50, Window: time.Hour},
		strategy.Rule{Limit: 500, Window: strategy.MaxWindow}))
	keys := []string{"", "0", "1s|", "9999999999s|x", "-5s|", " 7", "1e9", "3600s|60s|1", "\x00", "60s|", "0x10", "+3", "9223372036854775807", "18446744073709551616s|"}
	for _, k := range keys {
		if _, err := st.Admit(ctx, s, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Second + 999*time.Millisecond) // 1 s windows: start + 2 s not reached
	st.PruneExpired(ctx)
	var n int
	st.DB().QueryRow(`SELECT count(*) FROM rate_limit_windows`).Scan(&n)
	if n != 3*len(keys) {
		t.Errorf("%d rows after a prune before any window's start + 2W, want %d", n, 3*len(keys))
	}
	clk.Advance(time.Hour)
	for _, k := range keys {
		snap, err := st.Peek(ctx, s, k, 0)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Usage[2].Used != 1 {
			t.Errorf("key %q: 10-year window used %d after prunes, want 1", k, snap.Usage[2].Used)
		}
	}
	st.PruneExpired(ctx)
	st.DB().QueryRow(`SELECT count(*) FROM rate_limit_windows`).Scan(&n)
	if n != 2*len(keys) { // the 1 h (start + 2 h not reached) and 10-year rows stay
		t.Errorf("%d rows, want %d", n, 2*len(keys))
	}
}

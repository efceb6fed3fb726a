package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestPruneOddKeys: user keys full of digits, 's|', signs, spaces, exponents and NULs; a
// 1 s rule next to a 1 h rule and a 10-year rule. A prune one second before each row's
// start + 2W deletes nothing of it; every count survives until its window has ended.
func TestPruneOddKeys(t *testing.T) {
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
		t.Errorf("%d rows, want %d", n, len(keys))
	}
}

package sqlitestore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
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

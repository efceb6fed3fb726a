package sqlitestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	goleak.VerifyTestMain(m)
}

func open(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.db")
	st, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

// must is for strategies built from constant rules: an error there is a bug in the test.
func must(s *engine.Strategy, err error) *engine.Strategy {
	if err != nil {
		panic(err)
	}
	return s
}

func TestAdmit(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	st, _ := open(t, Options{Clock: clk})
	storetest.Admit(t, st, clk)
}

// TestWindowRows: the fixed window is the table, one row per key, window and aligned
// start, written as ISO 8601 UTC, the refused attempt included.
func TestWindowRows(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 30, 20, 15, 42, 0, time.UTC))
	st, _ := open(t, Options{Clock: clk})
	s := must(fixedwindow.New(strategy.Rule{Limit: 2, Window: time.Minute}, strategy.Rule{Limit: 100, Window: time.Hour}))
	for range 3 {
		if _, err := st.Admit(context.Background(), s, "client-a", 1); err != nil {
			t.Fatal(err)
		}
	}
	got := dump(t, st)
	want := "3600s|client-a 2026-11-30T20:00:00Z 3\n60s|client-a 2026-11-30T20:15:00Z 3\n"
	if got != want {
		t.Errorf("rows:\n%s\nwant:\n%s", got, want)
	}
}

func dump(t *testing.T, st *Store) string {
	t.Helper()
	rows, err := st.DB().Query(`SELECT key, window_start, count FROM rate_limit_windows ORDER BY key, window_start`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var k, start string
		var n int
		if err := rows.Scan(&k, &start, &n); err != nil {
			t.Fatal(err)
		}
		b.WriteString(k + " " + start + " " + strconv.Itoa(n) + "\n")
	}
	return b.String()
}

// TestPruneExpired: windows that started two window lengths ago or more go, newer ones stay,
// whatever their length; states in which nothing counts go.
func TestPruneExpired(t *testing.T) {
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

// TestPruneSampled: the store prunes on its own on one write in PruneEvery.
func TestPruneSampled(t *testing.T) {
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

func TestBadInput(t *testing.T) {
	var reported []error
	ctx := context.Background()
	for _, p := range []string{"", ":memory:"} {
		if _, err := Open(ctx, p, Options{}); err == nil || !strings.Contains(err.Error(), "file path") {
			t.Errorf("Open(%q): %v, want an error asking for a file path", p, err)
		}
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), Options{}); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
	st, _ := open(t, Options{OnError: func(err error) { reported = append(reported, err) }})
	half := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: 1500 * time.Millisecond, Granularity: 500 * time.Millisecond}))
	if _, err := st.Admit(ctx, half, "k", 1); err == nil || !strings.Contains(err.Error(), "whole seconds") {
		t.Errorf("a 1.5 s fixed window: %v", err)
	}
	s := must(tokenbucket.New(strategy.Rule{Limit: 5, Window: 5 * time.Second}))
	if _, err := st.Admit(ctx, s, "k", 6); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 6 of 5: %v", err)
	}
	if err := st.Record(ctx, s, "k", 0); !errors.Is(err, cache.ErrInvalidCount) {
		t.Errorf("record 0: %v", err)
	}
	if _, err := st.Admit(ctx, nil, "k", 1); err == nil {
		t.Error("nil strategy accepted")
	}
	// A state row that does not decode is reported, naming the key, and replaced: the key
	// works again at once.
	if _, err := st.DB().Exec(`INSERT INTO rate_limit_state VALUES ('bad', ?, x'ff00', 9e18)`, s.CounterID(0)); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Admit(ctx, s, "bad", 1); err != nil || !d.Allowed || d.Rules[0].Used != 1 {
		t.Errorf("corrupt state: %+v, %v; want admitted from an empty bucket", d, err)
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), `key "bad"`) || !strings.Contains(reported[0].Error(), "does not decode") {
		t.Errorf("reported %v, want one error naming the key", reported)
	}
	if u := storetest.Used(t, st, s, "bad"); u[0] != 1 {
		t.Errorf("used after the repair = %v, want 1", u)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := st.Admit(cctx, s, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	st.Close()
	if _, err := st.Admit(ctx, s, "k", 1); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if _, err := st.PruneExpired(ctx); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("prune after Close: %v", err)
	}
}

// TestPragmas: the file is in WAL mode with the busy timeout asked for, so that processes can
// share it.
func TestPragmas(t *testing.T) {
	st, _ := open(t, Options{BusyTimeout: 2500 * time.Millisecond})
	var mode string
	var busy int
	if err := st.DB().QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := st.DB().QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || busy != 2500 {
		t.Errorf("journal_mode %q, busy_timeout %d; want wal, 2500", mode, busy)
	}
}

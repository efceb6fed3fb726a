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

func TestAdmitDecisionsExact(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	st, _ := open(t, Options{Clock: clk})
	storetest.Admit(t, st, clk)
}

// TestFixedWindowRowPerAlignedStart: the fixed window is the table, one row per key, window
// and aligned start, written as ISO 8601 UTC, the refused attempt included.
func TestFixedWindowRowPerAlignedStart(t *testing.T) {
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

func TestBadInputRefusedOrRepaired(t *testing.T) {
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

// TestFileIsWALWithBusyTimeout: the file is in WAL mode with the busy timeout asked for, so that
// processes can share it.
func TestFileIsWALWithBusyTimeout(t *testing.T) {
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

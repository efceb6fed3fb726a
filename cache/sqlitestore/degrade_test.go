package sqlitestore

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// countingBase answers 200 to every request and counts them.
type countingBase struct{ n atomic.Int64 }

func (b *countingBase) RoundTrip(*http.Request) (*http.Response, error) {
	b.n.Add(1)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}, nil
}

// TestDegradePacesLocallyOnLockedFile: the SQLite store is shared through its file, so a paced
// Transport's default policy, Degrade, paces locally while another process holds the write lock
// past the busy timeout (SQLITE_BUSY), reports Degraded once, and sends every request. Before, the
// store's clock in this process (cache.Traits.Clock) was taken for an in-process store: Degrade
// acted as SendNothing and all 20 requests failed with a StoreError (found by review).
func TestDegradePacesLocallyOnLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rl.db")
	ctx := context.Background()
	st, err := Open(ctx, path, Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := &observetest.Recorder{}
	base := &countingBase{}
	tr, err := ratemonitor.New(base, ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Second}), ratemonitor.WithStore(st),
		ratemonitor.WithPacing(), ratemonitor.WithObserver(rec), ratemonitor.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	get := func() error {
		// 30 s: a request takes at most a pacing wait of a second idle; a loaded machine may
		// take several times that, and a request that fails here fails the test.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://example.invalid/", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil { // the tables exist, the store works
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil { // another process writing, stuck
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	for i := range 20 {
		if err := get(); err != nil {
			t.Fatalf("request %d with the file locked: %v; events %v", i, err, rec.Strings())
		}
	}
	if got := base.n.Load(); got != 21 {
		t.Errorf("%d requests sent, want 21", got)
	}
	degraded := 0
	for _, e := range rec.Events() {
		if e.Kind == observe.Degraded {
			degraded++
		}
	}
	if degraded != 1 {
		t.Errorf("%d Degraded events, want 1", degraded)
	}
}

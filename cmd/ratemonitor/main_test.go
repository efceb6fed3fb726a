package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) {
	// The AWS SDK's HTTP client keeps idle keep-alive connections, whose goroutines are
	// net/http's, not ours.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// runCmd runs the command in-process.
func runCmd(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw bytes.Buffer
	code = run(ctx, args, &out, &errw)
	return code, out.String(), errw.String()
}

func rule(limit int, w time.Duration) strategy.Rule { return strategy.Rule{Limit: limit, Window: w} }

// must panics on a setup error (the test fails with it).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// sqliteWith returns a store URL for a new SQLite file in which key has n requests recorded
// under s.
func sqliteWith(t *testing.T, s *engine.Strategy, key string, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.db")
	st := must(sqlitestore.Open(context.Background(), path, sqlitestore.Options{}))
	defer st.Close()
	if err := st.Record(context.Background(), s, key, n); err != nil {
		t.Fatal(err)
	}
	return "sqlite://" + path
}

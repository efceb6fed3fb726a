package transporttest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/internal/stacktest"
)

// TestAloneOnItsStoreSendsTheRequestItself: a Transport alone on a SQLite Store value sends the
// request unmarked (each Store value has its own cache.Sharing); with a second one, marked.
func TestAloneOnItsStoreSendsTheRequestItself(t *testing.T) {
	stacktest.AloneOnItsStoreSendsTheRequestItself(t, func() cache.Store {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "rl.db"), sqlitestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}

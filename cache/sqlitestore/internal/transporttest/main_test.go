package transporttest

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openSQLite opens a new SQLite store in the test's temporary directory with opts, closed when
// the test ends (a second Close is harmless).
func openSQLite(t *testing.T, opts sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

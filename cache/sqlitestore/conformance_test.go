package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest/conformance"
)

// TestConformance runs the conformance suite (internal/storetest/conformance) on the SQLite
// store: contention, monitoring, middleware admissions, clock steps (Options.Clock), the paced
// Transport, and 4 processes sharing one file with one killed. All cases of one run share one
// file, on keys of their own.
func TestConformance(t *testing.T) {
	path := conformance.Where() // a worker of the processes case: the parent's file
	if path == "" {
		path = filepath.Join(t.TempDir(), "conformance.db")
	}
	open := func(t testing.TB, clk clock.Clock) conformance.Store {
		st, err := Open(context.Background(), path, Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	conformance.Run(t, conformance.Target{
		Name:       "sqlite",
		Open:       open,
		Slow:       3, // one connection, every write a transaction: a third of the rounds
		Shared:     func(testing.TB) string { return path },
		OpenShared: func(t testing.TB, _ string) conformance.Store { return open(t, nil) },
	})
}

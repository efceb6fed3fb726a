// Package transportcheck makes and reads Transports in tests: one copy of what the core's
// tests and the stores' modules' Transport tests (which reach it through the core's path
// prefix) each had, so that a test moved to a store's module reads its counts the same way.
//
// It does not import the root package, so that the root's own (internal) tests can use it:
// it takes the root's constructor and Transports as type parameters and interfaces.
package transportcheck

import (
	"context"
	"net/http"
	"testing"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// New makes a Transport with newT (ratemonitor.New) on base with opts, fails t if that fails,
// and closes the Transport when the test ends.
func New[T interface{ Close() error }, O any](t testing.TB, newT func(http.RoundTripper, ...O) (T, error), base http.RoundTripper, opts ...O) T {
	t.Helper()
	tr, err := newT(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// Allocations is what UsedOf reads of a Transport.
type Allocations interface {
	AllocationUsed(ctx context.Context, key string) ([]strategy.Usage, error)
}

// UsedOf is the key's usage of each rule (AllocationUsed), failing t if it cannot be read.
func UsedOf(t testing.TB, tr Allocations, key string) []int {
	t.Helper()
	u, err := tr.AllocationUsed(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, x := range u {
		out = append(out, x.Used)
	}
	return out
}

// Used is the key's usage of its first rule.
func Used(t testing.TB, tr Allocations, key string) int {
	t.Helper()
	return UsedOf(t, tr, key)[0]
}

// StatusOf is the key's Status (S is ratemonitor.Status), failing t if it cannot be read.
func StatusOf[S any, T interface {
	Status(ctx context.Context, key string) (S, error)
}](t testing.TB, tr T, key string) S {
	t.Helper()
	s, err := tr.Status(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

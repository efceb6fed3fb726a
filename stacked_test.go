package ratemonitor_test

// The stacking tests (internal/stacktest) over the memory store: Transports stacked on one
// shared store and key count each attempt once per counter, and counters of the same window
// must have the same shape. The Redis module's transporttest runs them over the Redis store.

import (
	"testing"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/stacktest"
)

// memoryStores returns a maker of memory stores, each call a new, empty one, closed when the
// test ends.
func memoryStores(t *testing.T) func() cache.Store {
	return func() cache.Store {
		mem, err := cache.NewMemory(cache.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		return mem
	}
}

func TestStackedTransportsCountOnce(t *testing.T) {
	stacktest.StackedTransportsCountOnce(t, memoryStores(t))
}

func TestStackedPacedTransports(t *testing.T) {
	stacktest.StackedPacedTransports(t, memoryStores(t))
}

func TestSameWindowDifferentShapeRefused(t *testing.T) {
	stacktest.SameWindowDifferentShapeRefused(t, memoryStores(t))
}

func TestSameWindowSharesOneCount(t *testing.T) {
	stacktest.SameWindowSharesOneCount(t, memoryStores(t))
}

func TestAppRulesDoNotConflictWithKeyRules(t *testing.T) {
	stacktest.AppRulesDoNotConflictWithKeyRules(t, memoryStores(t))
}

func TestStackedFailoverCountsEveryAttempt(t *testing.T) {
	stacktest.StackedFailoverCountsEveryAttempt(t, memoryStores(t))
}

func TestStackedThreeLayersRetry(t *testing.T) {
	stacktest.StackedThreeLayersRetry(t, memoryStores(t))
}

func TestStackedInnerReservation(t *testing.T) {
	stacktest.StackedInnerReservation(t, memoryStores(t))
}

package transporttest

// The stacking tests (internal/stacktest, which the core runs over the memory store) over the
// Redis store: Transports stacked on one shared store and key count each attempt once per
// counter, and counters of the same window must have the same shape.

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/stacktest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// stackStore starts a Redis server and returns a maker of stores on it, each call a new, empty
// one: a prefix unique in the process, as counter claims (cache.ClaimCounters) are per
// address and prefix, and a later test's server may get an earlier one's port.
func stackStore(t *testing.T) func() cache.Store {
	srv := redistest.Start(t)
	return func() cache.Store {
		return newStore(t, srv, redisstore.Options{Prefix: fmt.Sprintf("stack%d:", stackPrefixes.Add(1))})
	}
}

// stackPrefixes numbers the Redis prefixes of stackStore across the test binary.
var stackPrefixes atomic.Int64

func TestStackedTransportsCountOnce(t *testing.T) {
	stacktest.StackedTransportsCountOnce(t, stackStore(t))
}

func TestStackedPacedTransports(t *testing.T) {
	stacktest.StackedPacedTransports(t, stackStore(t))
}

func TestSameWindowDifferentShapeRefused(t *testing.T) {
	stacktest.SameWindowDifferentShapeRefused(t, stackStore(t))
}

func TestSameWindowSharesOneCount(t *testing.T) {
	stacktest.SameWindowSharesOneCount(t, stackStore(t))
}

func TestAppRulesDoNotConflictWithKeyRules(t *testing.T) {
	stacktest.AppRulesDoNotConflictWithKeyRules(t, stackStore(t))
}

func TestStackedFailoverCountsEveryAttempt(t *testing.T) {
	stacktest.StackedFailoverCountsEveryAttempt(t, stackStore(t))
}

func TestStackedThreeLayersRetry(t *testing.T) {
	stacktest.StackedThreeLayersRetry(t, stackStore(t))
}

func TestStackedInnerReservation(t *testing.T) {
	stacktest.StackedInnerReservation(t, stackStore(t))
}

// TestClaimsReleasedOnRedisClose: a Redis store's Close forgets the counter claims made on its
// address and prefix, so that a later store there (a server restarted on the port, another
// test's) may use the same window with another margin; while the first is open it is refused.
// Before, the claims lasted the process: a test whose server got an earlier test's port was
// refused rules it never used.
func TestClaimsReleasedOnRedisClose(t *testing.T) {
	srv := redistest.Start(t)
	open := func() *redisstore.Store {
		st, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: "claims"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	first := open()
	newTransport(t, nil, ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}), ratemonitor.WithStore(first))
	other := strategy.Rule{Limit: 60, Window: time.Minute, Margin: 2 * time.Second}
	if _, err := ratemonitor.New(nil, ratemonitor.WithRules(other), ratemonitor.WithStore(open())); !errors.Is(err, cache.ErrCounterConflict) {
		t.Fatalf("another margin while the first store is open: %v, want ErrCounterConflict", err)
	}
	first.Close()
	newTransport(t, nil, ratemonitor.WithRules(other), ratemonitor.WithStore(open()))
}

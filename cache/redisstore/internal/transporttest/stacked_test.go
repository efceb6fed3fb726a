package transporttest

// The stacking tests (internal/stacktest, which the core runs over the memory store) over the
// Redis store: Transports stacked on one shared store and key count each attempt once per
// counter, and counters of the same window must have the same shape.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
// one: a prefix unique in the process, so that no count of one is seen by another.
func stackStore(t *testing.T) func() cache.Store {
	srv := redistest.Start(t)
	return func() cache.Store {
		return newStore(t, srv, redisstore.Options{Prefix: fmt.Sprintf("stack%d:", stackPrefixes.Add(1))})
	}
}

// stackPrefixes numbers the Redis prefixes of stackStore across the test binary.
var stackPrefixes atomic.Int64

func TestAloneOnItsStoreSendsTheRequestItself(t *testing.T) {
	stacktest.AloneOnItsStoreSendsTheRequestItself(t, stackStore(t))
}

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

// TestClaimsPerRedisStoreValue: counter claims live in the Store value (cache.Sharing). While
// the first store is open, another margin on it is refused; another Store value over the same
// server and prefix is a store of its own, whose rules are not checked against the first's (as
// another process's are not), and one made after Close starts afresh too. Before, the claims
// were per address and prefix in a process-wide map, which Close had to clear.
func TestClaimsPerRedisStoreValue(t *testing.T) {
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
	if _, err := ratemonitor.New(nil, ratemonitor.WithRules(other), ratemonitor.WithStore(first)); !errors.Is(err, cache.ErrCounterConflict) {
		t.Fatalf("another margin while the first store is open: %v, want ErrCounterConflict", err)
	}
	newTransport(t, nil, ratemonitor.WithRules(other), ratemonitor.WithStore(open()))
	first.Close()
	newTransport(t, nil, ratemonitor.WithRules(other), ratemonitor.WithStore(open()))
}

// TestStackedOverTwoRedisStoreValuesOverCount: Transports stacked over two Store values of one
// server and prefix are over two stores (each value has its own cache.Sharing, nothing is
// process-wide): each counts the attempt, in the one count they share. That is an over-count,
// never an under-count (docs/rules.md#several-rules-on-one-key); over one value it is counted once.
func TestStackedOverTwoRedisStoreValuesOverCount(t *testing.T) {
	srv := redistest.Start(t)
	opts := redisstore.Options{Prefix: "twovalues"}
	one, two := newStore(t, srv, opts), newStore(t, srv, opts)
	up := newTransport(t, answer200{}, ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}), ratemonitor.WithStore(one))
	for _, c := range []struct {
		name  string
		outer cache.Store
		want  int // the count after the request
	}{
		{"one value", one, 1},
		{"two values", two, 3},
	} {
		outer := newTransport(t, up, ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}), ratemonitor.WithStore(c.outer))
		resp, err := do(outer, context.Background(), "http://api.example/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := used(t, up, "api.example"); got != c.want {
			t.Errorf("%s: used %d after the request, want %d", c.name, got, c.want)
		}
	}
}

// answer200 is an upstream that answers every request 200 at once.
type answer200 struct{}

func (answer200) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// Package storetest holds the helpers the store tests share.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// The algorithms of the rolling window, the fixed window and the token bucket (types of their
// packages' own), for tests that layer rules with engine.New or tell strategies apart.
var (
	RollingWindow = algorithmOf(rollingwindow.New)
	FixedWindow   = algorithmOf(fixedwindow.New)
	TokenBucket   = algorithmOf(tokenbucket.New)
)

// algorithmOf returns the algorithm of the strategies newStrategy makes.
func algorithmOf(newStrategy func(...strategy.Rule) (*engine.Strategy, error)) engine.Algorithm {
	s, err := newStrategy(strategy.Rule{Limit: 1, Window: time.Second})
	if err != nil {
		panic(err)
	}
	return s.Algorithm()
}

// Strategy layers rules under the rolling window, failing the test on an invalid rule.
func Strategy(t testing.TB, rules ...strategy.Rule) *engine.Strategy {
	t.Helper()
	s, err := rollingwindow.New(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Peeker is the part of cache.Store that Used needs.
type Peeker interface {
	Peek(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Snapshot, error)
}

// Used returns key's usage per rule, failing the test on a store error.
func Used(t testing.TB, st Peeker, s *engine.Strategy, key string) []int {
	t.Helper()
	snap, err := st.Peek(context.Background(), s, key, 0)
	if err != nil {
		t.Fatalf("peek %q: %v", key, err)
	}
	u := make([]int, len(snap.Usage))
	for i, x := range snap.Usage {
		u[i] = x.Used
	}
	return u
}

package engine_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSameWindowRulesShareOneCounter: two rules of one window share a counter (slot); MaxBurst,
// Longest, Rules (a copy) and Expiry follow the layered rules.
func TestSameWindowRulesShareOneCounter(t *testing.T) {
	s, err := engine.New(storetest.RollingWindow,
		strategy.Rule{Limit: 60, Window: time.Minute},
		strategy.Rule{Limit: 5000, Window: 24 * time.Hour},
		strategy.Rule{Limit: 70, Window: time.Minute, Headroom: 20},
	)
	if err != nil {
		t.Fatal(err)
	}
	if s.Slots() != 2 || s.CounterID(0) == s.CounterID(1) {
		t.Errorf("slots %d: the two minute rules must share one counter", s.Slots())
	}
	if s.MaxBurst() != 50 {
		t.Errorf("MaxBurst = %d, want 50 (70 − headroom 20)", s.MaxBurst())
	}
	if s.Longest() != 24*time.Hour || s.Name() != "rollingwindow" {
		t.Errorf("Longest %v, Name %q", s.Longest(), s.Name())
	}
	rules := s.Rules()
	rules[0].Limit = 1
	if s.Rules()[0].Limit != 60 {
		t.Error("Rules returned the strategy's own slice")
	}
	if err := s.CheckBurst(51); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("CheckBurst(51) = %v", err)
	}
	cs := []engine.Counter{s.NewCounter(0), s.NewCounter(1)}
	if !engine.Expiry(cs).IsZero() {
		t.Error("empty counters have an expiry")
	}
	at := time.Unix(1000, 0)
	s.Record(cs, at, 1)
	if got := engine.Expiry(cs); !got.Equal(at.Add(24 * time.Hour)) {
		t.Errorf("Expiry = %v, want the day window's end", got)
	}
	if _, err := engine.New(nil, strategy.Rule{Limit: 1, Window: time.Second}); err == nil {
		t.Error("nil algorithm accepted")
	}
}

// TestBucketlessAlgorithmSkipsGranularityChecks: for an algorithm that uses no buckets (the fixed
// window), New skips only the granularity checks of Rule.Validate: a window that is not a multiple
// of 1 s is accepted, and every other check gives Rule.Validate's own message (both come from
// internal/rulecheck), wrapping strategy.ErrInvalidRule.
func TestBucketlessAlgorithmSkipsGranularityChecks(t *testing.T) {
	odd := strategy.Rule{Limit: 10, Window: 1500 * time.Millisecond}
	if _, err := engine.New(storetest.FixedWindow, odd); err != nil {
		t.Errorf("fixed window, 10/1.5s: %v, want accepted", err)
	}
	if _, err := engine.New(storetest.RollingWindow, odd); !errors.Is(err, strategy.ErrInvalidRule) {
		t.Errorf("rolling window, 10/1.5s: %v, want ErrInvalidRule", err)
	}
	for _, tc := range []struct {
		r    strategy.Rule
		want string
	}{
		{strategy.Rule{Limit: 0, Window: time.Second}, "invalid rule 0/1s: limit is 0, it must be at least 1"},
		{strategy.Rule{Limit: 5, Window: time.Second, Headroom: 5}, "invalid rule 5/1s (headroom 5): headroom 5 must be at least 0 and less than the limit 5"},
		{strategy.Rule{Limit: 5, Window: strategy.MaxWindow, Margin: time.Second}, "invalid rule 5/87600h0m0s (margin 1s): window+margin is longer than 87600h0m0s"},
	} {
		_, err := engine.New(storetest.FixedWindow, tc.r)
		if !errors.Is(err, strategy.ErrInvalidRule) || err.Error() != tc.want {
			t.Errorf("New(%s) = %v, want %q", tc.r, err, tc.want)
		}
		if verr := tc.r.Validate(); verr == nil || verr.Error() != tc.want {
			t.Errorf("%s.Validate() = %v, want the same %q", tc.r, verr, tc.want)
		}
	}
	if _, err := engine.New(nil, odd); err == nil || err.Error() != "engine.New: nil Algorithm: pass one, or use rollingwindow.New, fixedwindow.New or tokenbucket.New" {
		t.Errorf("New(nil) = %v", err)
	}
}

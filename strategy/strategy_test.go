package strategy_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLayering(t *testing.T) {
	s, err := strategy.New(rollingwindow.Algorithm{},
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
	cs := []strategy.Counter{s.NewCounter(0), s.NewCounter(1)}
	if !strategy.Expiry(cs).IsZero() {
		t.Error("empty counters have an expiry")
	}
	at := time.Unix(1000, 0)
	s.Record(cs, at, 1)
	if got := strategy.Expiry(cs); !got.Equal(at.Add(24 * time.Hour)) {
		t.Errorf("Expiry = %v, want the day window's end", got)
	}
	if _, err := strategy.New(nil, strategy.Rule{Limit: 1, Window: time.Second}); err == nil {
		t.Error("nil algorithm accepted")
	}
}

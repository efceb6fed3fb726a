package engine_test

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestScaledFloorsLimitsAtLeastOne: a share of a strategy floors each effective limit (at least
// 1, headroom dropped); a share of 1 or outside (0, 1) is the strategy itself.
func TestScaledFloorsLimitsAtLeastOne(t *testing.T) {
	s, err := rollingwindow.New(
		strategy.Rule{Limit: 60, Window: time.Minute, Headroom: 10, Margin: time.Second},
		strategy.Rule{Limit: 3, Window: time.Hour},
		strategy.Rule{Limit: 5000, Window: 24 * time.Hour},
	)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Scaled(0.25)
	want := []strategy.Rule{
		{Limit: 12, Window: time.Minute, Margin: time.Second}, // floor(50 × 1/4); no headroom
		{Limit: 1, Window: time.Hour},                         // floor(0.75), at least 1
		{Limit: 1250, Window: 24 * time.Hour},
	}
	for i, r := range sc.Rules() {
		if r != want[i] {
			t.Errorf("rule %d: %+v, want %+v", i, r, want[i])
		}
	}
	if sc.Name() != s.Name() {
		t.Errorf("algorithm %s, want %s", sc.Name(), s.Name())
	}
	one, _ := rollingwindow.New(strategy.Rule{Limit: 20, Window: time.Second})
	for _, share := range []float64{1, 0, -1, 2} {
		if one.Scaled(share) != one {
			t.Errorf("share %v: a new strategy, want the same", share)
		}
	}
}

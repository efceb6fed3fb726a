package degrade

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestSmoothingKeptWhenScaledForDegradedMode: in degraded mode a smoothed strategy and a plain one
// of the same rules are scaled apart, and the scaled smoothed one is still smoothed (15 of a halved
// 60 at once).
func TestSmoothingKeptWhenScaledForDegradedMode(t *testing.T) {
	plain, err := rollingwindow.New(strategy.Rule{Limit: 60, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sm, _ := plain.Smoothed()
	d := &Store{cfg: Config{Share: 0.5}}
	a, b := d.scaledFor(sm), d.scaledFor(plain)
	if !a.Smoothing() || a.MaxBurst() != 15 || b.Smoothing() || b.MaxBurst() != 30 {
		t.Fatalf("scaled smoothed: smoothing %v, max burst %d; scaled plain: %v, %d; want true 15, false 30",
			a.Smoothing(), a.MaxBurst(), b.Smoothing(), b.MaxBurst())
	}
}

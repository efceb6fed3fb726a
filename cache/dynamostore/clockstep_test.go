package dynamostore

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
)

// TestClockStepKeepsCountsAndWaits: issue 13, defect 4, on DynamoDB (dynalite) with a stepped
// clock, as the default wall clock can be: the shared suite, all three strategies (the fixed
// window's ADD finds the key's latest instant after now and falls back to the versioned write,
// which rebases).
func TestClockStepKeepsCountsAndWaits(t *testing.T) {
	_, c := server(t)
	clk := &storetest.SteppedClock{Base: clock.NewManual(time.Unix(1_800_000_000, 0))}
	storetest.ClockStep(t, newStore(t, c, Options{Clock: clk}), clk)
}

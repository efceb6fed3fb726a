package cache_test

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
)

// TestMemoryKeepsLimitsAcrossClockSteps: issue 13, defect 4, on the memory store over an injected
// clock.
func TestMemoryKeepsLimitsAcrossClockSteps(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(time.Unix(1_800_000_000, 0))}
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	storetest.ClockStep(t, m, clk)
}

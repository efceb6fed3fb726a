package cache_test

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
)

// TestMemoryAdmitDecisionsExact: the memory store's admissions give every figure of every
// Decision exactly as the strategies do on their own counters (storetest.Admit).
func TestMemoryAdmitDecisionsExact(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	storetest.Admit(t, m, clk)
}

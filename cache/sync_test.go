package cache_test

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
)

// TestMemorySyncAnswersExact: the memory store's Sync raises, never lowers, the rule named,
// pauses, and refuses a bad update, with exact answers (storetest.Sync).
func TestMemorySyncAnswersExact(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	storetest.Sync(t, m, clk)
}

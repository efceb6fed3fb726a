package cache_test

import (
	"time"

	"testing"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest/leasetest"
)

// TestMemoryLeasesExact: the memory store passes the cache.Leaser cases (leasetest.Run): exact
// waits, expiry at the lease's end, renewal, release, and never more leases than the limit.
func TestMemoryLeasesExact(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	leasetest.Run(t, m, clk)
}

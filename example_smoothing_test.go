package ratemonitor_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Smoothed pacing at 60 per minute: from idle 30 requests go at once, then one every
// 60 s / 31. The clock is simulated (a manual clock whose sleeps move it), so the instants are
// exact; a real program leaves out the store and the clock.
func ExampleWithSmoothing() {
	start := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(start)
	clk.Auto = true
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer mem.Close()
	tr, err := ratemonitor.New(nil,
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithPacing(),
		ratemonitor.WithSmoothing(),
		ratemonitor.WithStore(mem))
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	ctx := context.Background()
	for i := 1; i <= 33; i++ {
		if _, err := tr.Reserve(ctx, "tenant", 1); err != nil {
			panic(err)
		}
		if i == 1 || i >= 30 {
			fmt.Printf("request %d at +%v\n", i, clk.Now().Sub(start))
		}
	}
	used, err := tr.AllocationUsed(ctx, "tenant")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("used", used[0].Used, "of", used[0].Rule.Limit)
	// Output:
	// request 1 at +0s
	// request 30 at +0s
	// request 31 at +1.935484s
	// request 32 at +3.870968s
	// request 33 at +5.806452s
	// used 33 of 60
}

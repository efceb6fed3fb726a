package ratemonitor_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Requests queued on a key are served by priority: the user's click, queued last, goes before
// the second batch job. The first batch job already had the turn and keeps it.
func ExampleWithPriority() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(strategy.Rule{Limit: 1, Window: 10 * time.Second}),
		ratemonitor.WithPacing(), ratemonitor.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	ctx := context.Background()
	if _, err := tr.Reserve(ctx, "tenant", 1); err != nil { // the window is full now
		fmt.Println(err)
		return
	}
	done := make(chan string)
	queue := func(name string, p ratemonitor.Priority) {
		queued := tr.Queued("tenant")
		go func() {
			if _, err := tr.Reserve(ratemonitor.WithPriority(ctx, p), "tenant", 1); err != nil {
				name = err.Error()
			}
			done <- name
		}()
		for tr.Queued("tenant") == queued {
			time.Sleep(time.Millisecond)
		}
	}
	queue("batch job 1", ratemonitor.PriorityBatch)
	queue("batch job 2", ratemonitor.PriorityBatch)
	queue("user click", ratemonitor.PriorityInteractive)
	for range 3 {
		for clk.Sleepers() == 0 { // the head is asleep until its slot is free
			time.Sleep(time.Millisecond)
		}
		clk.Advance(10 * time.Second)
		fmt.Println(<-done)
	}
	// Output:
	// batch job 1
	// user click
	// batch job 2
}

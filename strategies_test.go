package ratemonitor

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestPacingOtherStrategies: the Transport paces under the fixed window and the token bucket
// as under the rolling window: each request goes at the first instant its strategy allows.
func TestPacingOtherStrategies(t *testing.T) {
	for _, c := range []struct {
		name string
		s    func() (*engine.Strategy, error)
		want []time.Duration // send instants after t0 (which is on a 10 s boundary)
	}{
		// 3 per aligned 10 s: three at 2 s, the rest when the next window opens.
		{"fixedwindow", func() (*engine.Strategy, error) {
			return fixedwindow.New(strategy.Rule{Limit: 3, Window: 10 * time.Second})
		}, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second, 10 * time.Second, 10 * time.Second}},
		// 2 tokens refilled at one a second: two at once, then one a second.
		{"tokenbucket", func() (*engine.Strategy, error) {
			return tokenbucket.New(strategy.Rule{Limit: 2, Window: 2 * time.Second})
		}, []time.Duration{2 * time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.s()
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewManual(t0)
			st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			b := &clockBase{clk: clk}
			tr := newTransport(t, b, WithStore(st), WithStrategy(s), WithPacing(), WithLogger(discard))
			clk.Advance(2 * time.Second)
			for i := range c.want {
				done := make(chan error, 1)
				go func() { done <- doKey(tr, context.Background(), "k") }()
				// Either the request goes at once, or it sleeps on the clock until the instant
				// its strategy allows, which the clock is then moved to.
				for sent := false; !sent; {
					select {
					case err := <-done:
						if err != nil {
							t.Fatal(err)
						}
						sent = true
					case <-time.After(time.Millisecond):
						if clk.Sleepers() == 1 {
							next, _ := clk.Next()
							clk.Set(next)
						}
					}
				}
				if got := b.sent[i].Sub(t0); got != c.want[i] {
					t.Errorf("request %d sent at %v, want %v", i+1, got, c.want[i])
				}
			}
		})
	}
}

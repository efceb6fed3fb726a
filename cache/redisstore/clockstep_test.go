package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestRecordsNeverDropped: issue 13, defect 4, in the scripts. Records dated an hour before the
// key's latest instant (Options.Clock stepped back; Redis TIME itself cannot be stepped in a
// test) count at the latest instant: before, the rolling and fixed windows' scripts dropped
// all 130. The scripts do not rebase a key on a step (strategy.Rebase): they answer at its
// latest instant, as a Redis whose own clock went back would.
func TestRecordsNeverDropped(t *testing.T) {
	srv := redistest.Start(t)
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0.Add(10 * time.Second))}
	st := newStore(t, srv.Client(), Options{Clock: clk})
	ctx := context.Background()
	rule := strategy.Rule{Limit: 100, Window: time.Minute}
	for _, mk := range []func(...strategy.Rule) (*strategy.Strategy, error){rollingwindow.New, fixedwindow.New, tokenbucket.New} {
		s, err := mk(rule)
		if err != nil {
			t.Fatal(err)
		}
		key := "late-" + s.Name()
		if err := st.Record(ctx, s, key, 10); err != nil {
			t.Fatal(err)
		}
		clk.Step(-time.Hour)
		for range 130 {
			clk.Advance(100 * time.Millisecond)
			if err := st.Record(ctx, s, key, 1); err != nil {
				t.Fatal(err)
			}
		}
		if u := storetest.Used(t, st, s, key); u[0] != 140 {
			t.Errorf("%s: used %d after 10 + 130 records across a step back, want 140", s.Name(), u[0])
		}
		clk.Step(time.Hour)
	}
}

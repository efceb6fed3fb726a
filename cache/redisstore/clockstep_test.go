package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestSteppedClockLocksNoKeyOut: issue 13, defect 4, on Redis with a stepped Options.Clock (the now override
// the scripts take in place of TIME): the shared suite, all three strategies. Before the
// scripts kept a clock offset per key, a key stepped back 1 h was answered at its latest
// instant and locked out for the hour (every "a full limit stays full" part failed).
func TestSteppedClockLocksNoKeyOut(t *testing.T) {
	srv := redistest.Start(t)
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	storetest.ClockStep(t, newStore(t, srv.Client(), Options{Clock: clk}), clk)
}

// TestRecordsNeverDropped: issue 13, defect 4, in the scripts. Records dated an hour before the
// key's latest instant (Options.Clock stepped back; Redis TIME itself cannot be stepped in a
// test) all count: before, the rolling and fixed windows' scripts dropped all 130. The key is
// rebased on the first of them (its clock offset raised by the hour), so the token bucket
// refills on the new clock for the 12.9 s they span: 140 spent, 21.5 refilled, 119 missing.
func TestRecordsNeverDropped(t *testing.T) {
	srv := redistest.Start(t)
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0.Add(10 * time.Second))}
	st := newStore(t, srv.Client(), Options{Clock: clk})
	ctx := context.Background()
	rule := strategy.Rule{Limit: 100, Window: time.Minute}
	for _, a := range []struct {
		mk   func(...strategy.Rule) (*engine.Strategy, error)
		used int
	}{{rollingwindow.New, 140}, {fixedwindow.New, 140}, {tokenbucket.New, 119}} {
		s, err := a.mk(rule)
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
		if u := storetest.Used(t, st, s, key); u[0] != a.used {
			t.Errorf("%s: used %d after 10 + 130 records across a step back, want %d", s.Name(), u[0], a.used)
		}
		clk.Step(time.Hour)
	}
}

package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// SteppedClock is a wall clock that can be stepped either way, for tests: Now is Base's
// instant plus the steps so far; Sleep is Base's (a step does not move a sleeper, as the
// monotonic timers under the wall clock are not moved by a step of the system clock).
type SteppedClock struct {
	Base *clock.Manual
	off  atomic.Int64 // ns
}

// Now returns Base's instant plus the steps made.
func (c *SteppedClock) Now() time.Time { return c.Base.Now().Add(time.Duration(c.off.Load())) }

// Sleep is Base's Sleep.
func (c *SteppedClock) Sleep(ctx context.Context, d time.Duration) error { return c.Base.Sleep(ctx, d) }

// Step moves the clock's reading by d (d < 0: back), as an NTP step or a manual change does.
func (c *SteppedClock) Step(d time.Duration) { c.off.Add(int64(d)) }

// Advance moves time forward by d: Base, and so Now.
func (c *SteppedClock) Advance(d time.Duration) { c.Base.Advance(d) }

// ClockStep checks, on st whose clock is clk, what docs/reliability.md#clock-steps promises about a clock step
// (issue 13, defect 4), under the rolling window, the fixed window and the token bucket:
//   - stepped back 1 h, every record is counted (none is dropped because it is dated before
//     the key's latest instant), and the waits are what they would have been without the step;
//   - a full limit stays full after the step (no fresh fixed window; Admit refuses too when st
//     is an Admitter), and the wait a Reserve tells is the wait it gets on the new clock, not
//     the hour until the clock catches up;
//   - stepped back less than engine.StepTolerance, the wait told is measured so that
//     sleeping it is enough;
//   - stepped forward 1 day, the state has simply expired: a full limit at once, no huge wait.
//
// Each part moves clk on by a day from where the last left it, to a whole number of minutes,
// and uses a key named after the part.
func ClockStep(t *testing.T, st Store, clk *SteppedClock) {
	ctx := context.Background()
	rule := strategy.Rule{Limit: 100, Window: time.Minute}
	algs := []struct {
		name string
		new  func(...strategy.Rule) (*engine.Strategy, error)
		// after 10 records at T, a 1 h step back and 130 records 100 ms apart from there:
		used int           // count at the last record
		wait time.Duration // wait for one more, at the last record
	}{
		// 10 at T and 10 at T−1h+0..0.9 s share the first granule (latest +0.9 s); the 41st
		// oldest is in the granule whose latest is +3.9 s: it leaves at +63.9 s, 51 s after
		// the last record at +12.9 s.
		{"rollingwindow", rollingwindow.New, 140, 51 * time.Second},
		// T is 10 s into a minute: the window ends 50 s after T−1h, 37.1 s after +12.9 s.
		{"fixedwindow", fixedwindow.New, 140, 37100 * time.Millisecond},
		// 140 spent, 12.9 s × 100/60 = 21.5 refilled: 118.5 missing (119 rounded up); 19.5
		// tokens more to refill for one, 11.7 s.
		{"tokenbucket", tokenbucket.New, 119, 11700 * time.Millisecond},
	}
	// day moves the clock on by a day, to a whole number of minutes.
	day := func() {
		clk.Advance(24 * time.Hour)
		if r := clk.Now().Sub(fixedcount.WindowStart(clk.Now(), time.Minute)); r > 0 {
			clk.Advance(time.Minute - r)
		}
	}
	peek := func(t *testing.T, s *engine.Strategy, key string, n int) strategy.Snapshot {
		t.Helper()
		snap, err := st.Peek(ctx, s, key, n)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	reserve := func(t *testing.T, s *engine.Strategy, key string, n int) engine.Result {
		t.Helper()
		res, err := st.Reserve(ctx, s, key, n)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, a := range algs {
		s, err := a.new(rule)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(a.name+"/monitoring across a step back", func(t *testing.T) {
			day()
			clk.Advance(10 * time.Second)
			key := "step-back-" + a.name
			if err := st.Record(ctx, s, key, 10); err != nil {
				t.Fatal(err)
			}
			clk.Step(-time.Hour)
			for i := range 130 {
				if i > 0 {
					clk.Advance(100 * time.Millisecond)
				}
				if err := st.Record(ctx, s, key, 1); err != nil {
					t.Fatal(err)
				}
			}
			if snap := peek(t, s, key, 1); snap.Usage[0].Used != a.used || snap.Wait != a.wait {
				t.Errorf("after the step: used %d, wait(1) %v; want %d, %v", snap.Usage[0].Used, snap.Wait, a.used, a.wait)
			}
			clk.Advance(a.wait)
			if res := reserve(t, s, key, 1); !res.Allowed {
				t.Errorf("reserve after the wait told: %+v, want allowed", res)
			}
		})
		t.Run(a.name+"/a full limit stays full", func(t *testing.T) {
			day()
			clk.Advance(10 * time.Second)
			key := "full-" + a.name
			if res := reserve(t, s, key, 100); !res.Allowed {
				t.Fatalf("first reserve: %+v, want allowed", res)
			}
			clk.Step(-time.Hour)
			// The store cannot tell when the clock stepped: the key's latest instant becomes
			// now, and the waits are those right after filling it (the rolling window's 100
			// leave in 60 s, the fixed window ends in 50 s, 10 tokens refill in 6 s). The
			// first operation after the step is a Peek (WaitTime): what it says must hold
			// for the operations after it, on the new clock.
			want := map[string]time.Duration{"rollingwindow": time.Minute, "fixedwindow": 50 * time.Second,
				"tokenbucket": 6 * time.Second}[a.name]
			if snap := peek(t, s, key, 10); snap.Wait != want || snap.Usage[0].Used != 100 {
				t.Fatalf("peek after the step: used %d, wait %v; want 100, %v", snap.Usage[0].Used, snap.Wait, want)
			}
			clk.Advance(want / 2)
			if res := reserve(t, s, key, 10); res.Allowed || res.Wait != want/2 {
				t.Fatalf("reserve half the wait later: %+v, want refused with wait %v", res, want/2)
			}
			if ad, ok := st.(admitter); ok {
				// A server's admission is refused too (under the fixed window, counted).
				d, err := ad.Admit(ctx, s, key, 10)
				if err != nil || d.Allowed || d.RetryAfter != want/2 {
					t.Fatalf("admit half the wait later: %+v %v, want refused, retry after %v", d, err, want/2)
				}
			}
			clk.Advance(want / 2)
			if res := reserve(t, s, key, 10); !res.Allowed {
				t.Errorf("reserve after the wait told: %+v, want allowed (the wait told is the wait got)", res)
			}
		})
		t.Run(a.name+"/a step back within the tolerance", func(t *testing.T) {
			day()
			clk.Advance(10 * time.Second)
			key := "small-" + a.name
			if res := reserve(t, s, key, 100); !res.Allowed {
				t.Fatalf("first reserve: %+v, want allowed", res)
			}
			clk.Step(-500 * time.Millisecond)
			want := map[string]time.Duration{"rollingwindow": 60500 * time.Millisecond, "fixedwindow": 50500 * time.Millisecond,
				"tokenbucket": 1100 * time.Millisecond}[a.name]
			res := reserve(t, s, key, 1)
			if res.Allowed || res.Wait != want {
				t.Fatalf("reserve 0.5 s behind the key: %+v, want refused with wait %v", res, want)
			}
			clk.Advance(want)
			if res := reserve(t, s, key, 1); !res.Allowed {
				t.Errorf("reserve after the wait told: %+v, want allowed", res)
			}
		})
		t.Run(a.name+"/a step forward by a day", func(t *testing.T) {
			day()
			clk.Advance(10 * time.Second)
			key := "forward-" + a.name
			if res := reserve(t, s, key, 100); !res.Allowed {
				t.Fatalf("first reserve: %+v, want allowed", res)
			}
			clk.Step(24 * time.Hour)
			if snap := peek(t, s, key, 100); snap.Usage[0].Used != 0 || snap.Wait != 0 {
				t.Errorf("a day later: used %d, wait(100) %v; want 0, 0", snap.Usage[0].Used, snap.Wait)
			}
			if res := reserve(t, s, key, 100); !res.Allowed {
				t.Errorf("reserve a day later: %+v, want allowed", res)
			}
			if res := reserve(t, s, key, 1); res.Allowed || res.Wait <= 0 || res.Wait > time.Minute {
				t.Errorf("reserve over the limit a day later: %+v, want refused with a wait in (0, 1m]", res)
			}
		})
	}
}

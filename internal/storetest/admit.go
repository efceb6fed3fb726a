package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// AdmitStore is the part of cache.Store and cache.Admitter that Admit uses (declared here so
// that the cache package's own tests can use this one).
type AdmitStore interface {
	Peeker
	Record(ctx context.Context, s *engine.Strategy, key string, n int) error
	Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error)
	Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error
	Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error)
}

// step is one admission and what it must answer: allowed, Retry-After, and per rule the used
// count, remaining count and reset.
type step struct {
	at      float64 // seconds since the Unix epoch
	allowed bool
	retry   time.Duration
	used    []int
	rem     []int
	reset   []time.Duration
}

func at(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

// Admit runs the same admissions under the fixed window, the token bucket and the rolling
// window on st, whose clock is clk, and checks every figure of every Decision, then that
// Reserve, Release and Peek agree with them. Stores that pass it answer a server's requests
// exactly like the in-memory strategy.
func Admit(t *testing.T, st AdmitStore, clk *clock.Manual) {
	ctx := context.Background()
	s3 := strategy.Rule{Limit: 3, Window: 10 * time.Second}
	// Each subtest runs 12 000 s after the one before (a multiple of every window below), as
	// a store's time never goes backwards.
	base := 0.0
	run := func(t *testing.T, s *engine.Strategy, key string, steps []step) {
		t.Helper()
		base += 12000
		for i, w := range steps {
			clk.Set(at(base + w.at))
			d, err := st.Admit(ctx, s, key, 1)
			if err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
			ok := d.Allowed == w.allowed && d.RetryAfter == w.retry && len(d.Rules) == len(w.used)
			for r := 0; ok && r < len(d.Rules); r++ {
				ok = d.Rules[r].Used == w.used[r] && d.Rules[r].Remaining == w.rem[r] && d.Rules[r].Reset == w.reset[r]
			}
			if !ok {
				t.Errorf("step %d at %v: %+v\nwant allowed %v, retry %v, used %v, remaining %v, reset %v",
					i+1, w.at, d, w.allowed, w.retry, w.used, w.rem, w.reset)
			}
		}
	}
	must := func(s *engine.Strategy, err error) *engine.Strategy {
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	d := func(s float64) time.Duration { return time.Duration(s * 1e9) }

	t.Run("fixed window counts the refused attempt", func(t *testing.T) {
		run(t, must(fixedwindow.New(s3)), "fw", []step{
			{1001.25, true, 0, []int{1}, []int{2}, []time.Duration{d(8.75)}},
			{1001.25, true, 0, []int{2}, []int{1}, []time.Duration{d(8.75)}},
			{1002, true, 0, []int{3}, []int{0}, []time.Duration{d(8)}},
			{1002, false, d(8), []int{4}, []int{0}, []time.Duration{d(8)}},
			{1009, false, d(1), []int{5}, []int{0}, []time.Duration{d(1)}},
			{1010, true, 0, []int{1}, []int{2}, []time.Duration{d(10)}},
		})
	})
	t.Run("fixed windows layered", func(t *testing.T) {
		s := must(fixedwindow.New(strategy.Rule{Limit: 2, Window: time.Second}, strategy.Rule{Limit: 3, Window: time.Minute}))
		run(t, s, "fw2", []step{
			{60.5, true, 0, []int{1, 1}, []int{1, 2}, []time.Duration{d(0.5), d(59.5)}},
			{60.5, true, 0, []int{2, 2}, []int{0, 1}, []time.Duration{d(0.5), d(59.5)}},
			{60.5, false, d(59.5), []int{3, 3}, []int{0, 0}, []time.Duration{d(0.5), d(59.5)}},
			{61, false, d(59), []int{1, 4}, []int{1, 0}, []time.Duration{d(1), d(59)}},
		})
	})
	t.Run("token bucket spends nothing on refusal", func(t *testing.T) {
		s := must(tokenbucket.New(strategy.Rule{Limit: 2, Window: 2 * time.Second}, strategy.Rule{Limit: 10, Window: 100 * time.Second}))
		run(t, s, "tb", []step{
			{50, true, 0, []int{1, 1}, []int{1, 9}, []time.Duration{d(1), d(10)}},
			{50, true, 0, []int{2, 2}, []int{0, 8}, []time.Duration{d(2), d(20)}},
			{50, false, d(1), []int{2, 2}, []int{0, 8}, []time.Duration{d(2), d(20)}},
			{50.25, false, d(0.75), []int{2, 2}, []int{0, 8}, []time.Duration{d(1.75), d(19.75)}},
			{51, true, 0, []int{2, 3}, []int{0, 7}, []time.Duration{d(2), d(29)}},
		})
	})
	t.Run("rolling window", func(t *testing.T) {
		run(t, must(rollingwindow.New(s3)), "rw", []step{
			{1000, true, 0, []int{1}, []int{2}, []time.Duration{d(10)}},
			{1004, true, 0, []int{2}, []int{1}, []time.Duration{d(10)}},
			{1004, true, 0, []int{3}, []int{0}, []time.Duration{d(10)}},
			{1005, false, d(5), []int{3}, []int{0}, []time.Duration{d(9)}},
			{1010, true, 0, []int{3}, []int{0}, []time.Duration{d(10)}},
		})
	})
	t.Run("reserve, release and peek under the fixed window", func(t *testing.T) {
		s := must(fixedwindow.New(s3))
		base += 12000
		clk.Set(at(base + 2003))
		var last engine.Result
		for i := range 3 {
			res, err := st.Reserve(ctx, s, "fwr", 1)
			if err != nil || !res.Allowed || !res.At.Equal(at(base+2003)) {
				t.Fatalf("reserve %d: %+v, %v", i+1, res, err)
			}
			last = res
		}
		res, err := st.Reserve(ctx, s, "fwr", 1)
		if err != nil || res.Allowed || res.Wait != d(7) {
			t.Fatalf("fourth reserve: %+v, %v; want a wait of 7s and nothing counted", res, err)
		}
		if u := Used(t, st, s, "fwr"); u[0] != 3 {
			t.Fatalf("used after a refused reserve = %v, want 3", u)
		}
		if err := st.Release(ctx, s, "fwr", last.At, 1); err != nil {
			t.Fatal(err)
		}
		snap, err := st.Peek(ctx, s, "fwr", 1)
		if err != nil || snap.Wait != 0 || snap.Usage[0].Used != 2 || snap.Usage[0].Remaining != 1 {
			t.Fatalf("peek after release: %+v, %v; want used 2, no wait", snap, err)
		}
		if err := st.Record(ctx, s, "fwr", 5); err != nil {
			t.Fatal(err)
		}
		snap, _ = st.Peek(ctx, s, "fwr", 3)
		if snap.Usage[0].Used != 7 || snap.Wait != d(7) {
			t.Fatalf("peek after recording 5: %+v; want used 7, wait 7s", snap)
		}
		clk.Set(at(base + 2010))
		if u := Used(t, st, s, "fwr"); u[0] != 0 {
			t.Fatalf("used in the next window = %v, want 0", u)
		}
	})
}

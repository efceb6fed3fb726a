package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestSmoothedSameAsMemory drives the memory store (the engine's GCRA in Go) and the Redis store
// (its script's GCRA slots) with the same random operations under smoothed rolling-window
// strategies of one to three rules, on one manual clock, and requires identical answers to
// every Reserve, Admit, Record, Release, Peek and Sync. A second, plain strategy of the first
// rule shares the key now and then (the GCRA slots are then another strategy's, kept as they
// are).
func TestSmoothedSameAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	var iteration atomic.Int64
	storetest.FewChecks(t, 40) // keeps the -race run short; -rapid.checks=N for more
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual(t0.Add(time.Duration(rapid.Int64Range(0, 1e9).Draw(rt, "start µs")) * time.Microsecond))
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		red := newStore(t, client, Options{Clock: clk})
		units := []time.Duration{time.Millisecond, 100 * time.Millisecond}
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			g := units[rapid.IntRange(0, len(units)-1).Draw(rt, "unit")]
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit, Granularity: g,
				Window:   time.Duration(rapid.IntRange(1, 50).Draw(rt, "w")) * g * 10,
				Margin:   time.Duration(rapid.IntRange(0, 3).Draw(rt, "m")) * g,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		plain, err := rollingwindow.New(rules...)
		if err != nil {
			rt.Fatal(err)
		}
		s, err := plain.Smoothed()
		if err != nil {
			rt.Fatal(err)
		}
		key := "smooth-" + strconv.FormatInt(iteration.Add(1), 10)
		storetest.Differential(rt, clk, mem, red, s, key, storetest.Ops{Admit: true, Sync: true})
		if rapid.Bool().Draw(rt, "then plain") {
			first, _ := rollingwindow.New(rules[0])
			storetest.Differential(rt, clk, mem, red, first, key, storetest.Ops{Admit: true, Sync: true})
			storetest.Differential(rt, clk, mem, red, s, key, storetest.Ops{Admit: true, Sync: true})
		}
	})
}

// TestSmoothedSlotHoldsItsTAT: the GCRA slot of a smoothed 5/min rule (b = 3, T = 20 s) holds, after a
// burst of 2 at t0, its TAT t0 + 40 s in the newest-bucket instant, and the fixed figures of a
// GCRA slot; one more reserve fits, a fourth waits exactly 20 s.
func TestSmoothedSlotHoldsItsTAT(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	s, err := rollingwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s, err = s.Smoothed(); err != nil {
		t.Fatal(err)
	}
	st := newStore(t, c, Options{Clock: clock.NewManual(t0)})
	if res, err := st.Reserve(ctx, s, "k", 2); err != nil || !res.Allowed {
		t.Fatalf("reserve 2: %+v %v", res, err)
	}
	dv, err := decodeValue(c.Get(ctx, st.Keys(s, "k")[0]).Val())
	if err != nil {
		t.Fatal(err)
	}
	us := t0.UnixMicro()
	want := []int64{us, 0, 0, -1, 0, us + 40_000_000, 0, -1 << 53}
	got := dv.slots["gcra:20000000000:3"]
	for i := range want {
		if got == nil || got[i] != want[i] {
			t.Fatalf("GCRA slot %v, want %v (ids %v)", got, want, dv.ids)
		}
	}
	if res, _ := st.Reserve(ctx, s, "k", 1); !res.Allowed {
		t.Fatalf("third: %+v, want allowed", res)
	}
	if res, _ := st.Reserve(ctx, s, "k", 1); res.Allowed || res.Wait != 20*time.Second {
		t.Fatalf("fourth: %+v, want a wait of 20s", res)
	}
}

// TestCorruptSmoothedSlotStartsAfresh: a GCRA slot holding what no script writes (a TAT more than b·T past
// the slot's time, one without a time, or a rolling slot's figures: a total, buckets)
// is unreadable, as TestCorruptNumbersStartAfreshReported's: the key is started afresh, reported once, and then
// answers exactly as a key never written.
func TestCorruptSmoothedSlotStartsAfresh(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	s, err := rollingwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s, err = s.Smoothed(); err != nil {
		t.Fatal(err)
	}
	d := func(x float64) string { return string(binary.LittleEndian.AppendUint64(nil, math.Float64bits(x))) }
	us := float64(t0.UnixMicro())
	// the GCRA slot (the second): hw, total, nb, rr, ra, hl (TAT), hc, lo
	for _, tc := range []struct {
		name string
		at   int
		val  string
	}{
		{"tat-an-hour-ahead", 5, d(us + 3600e6)},
		{"no-hw", 0, d(-(1 << 53))},
		{"a-total", 1, d(4)},
		{"buckets", 2, d(1)},
		{"a-report", 3, d(2)},
		{"a-newest-count", 6, d(1)},
		{"an-oldest", 7, d(us)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &observetest.Recorder{}
			clk := clock.NewManual(t0)
			st := newStore(t, c, Options{Clock: clk, Observer: rec})
			key := "smooth-corrupt-" + tc.name
			if _, err := st.Reserve(ctx, s, key, 3); err != nil {
				t.Fatal(err)
			}
			rk := st.Keys(s, key)[0]
			dv, err := decodeValue(c.Get(ctx, rk).Val())
			if err != nil {
				t.Fatal(err)
			}
			pos := dv.fixed - 8*8 + 8*tc.at // the last slot's doubles
			if err := c.SetRange(ctx, rk, int64(pos), tc.val).Err(); err != nil {
				t.Fatal(err)
			}
			ref := key + "-fresh"
			for i := range 12 {
				clk.Advance(7 * time.Second)
				res, err := st.Reserve(ctx, s, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				want, err := st.Reserve(ctx, s, ref, 1)
				if err != nil {
					t.Fatal(err)
				}
				if res != want {
					t.Fatalf("reserve %d: %+v, a fresh key %+v", i+1, res, want)
				}
			}
			lost := 0
			for _, e := range rec.Events() {
				if e.Kind == observe.StateLost && e.Key == key {
					lost++
				}
			}
			if lost != 1 {
				t.Errorf("StateLost events %d, want 1", lost)
			}
		})
	}
}

// TestOnlyRollingWindowSmoothable: the store holds smoothed rolling-window strategies; a fixed window
// cannot be smoothed at all (engine.ErrNotSmoothable).
func TestOnlyRollingWindowSmoothable(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{})
	s, _ := rollingwindow.New(strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute})
	sm, err := s.Smoothed()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.validate(sm); err != nil {
		t.Errorf("Validate(smoothed 60/min + 5000/day) = %v, want nil", err)
	}
	fw, _ := fixedwindow.New(strategy.Rule{Limit: 60, Window: time.Minute})
	if _, err := fw.Smoothed(); err == nil {
		t.Error("a fixed window was smoothed")
	}
}

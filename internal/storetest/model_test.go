package storetest

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

func g(s float64, n int) Grant { return Grant{At: at(s), N: n} }

// TestModelFlagsOneOverLimit: the model accepts exactly the limit at its edges and flags one more, per algorithm.
func TestModelFlagsOneOverLimit(t *testing.T) {
	r := strategy.Rule{Limit: 3, Window: 10 * time.Second}
	rw, _ := rollingwindow.New(r)
	fw, _ := fixedwindow.New(r)
	tb, _ := tokenbucket.New(r)
	cases := []struct {
		name   string
		s      *engine.Strategy
		grants []Grant
		slack  time.Duration
		want   int
	}{
		{"rolling: 3 in a window, the 4th at its edge", rw, []Grant{g(1000, 2), g(1005, 1), g(1010, 1)}, 0, 0},
		{"rolling: the 4th 1 ns early", rw, []Grant{g(1000, 2), g(1005, 1), g(1009.999999999, 1)}, 0, 1},
		{"rolling: slack shrinks the window", rw, []Grant{g(1000, 2), g(1005, 1), g(1009.5, 1)}, time.Second, 0},
		{"fixed: 3 per aligned window, 3 more in the next", fw, []Grant{g(1009, 3), g(1010, 3)}, 0, 0},
		{"fixed: 4 in one window", fw, []Grant{g(1000, 1), g(1009.9, 3)}, 0, 1},
		{"fixed: slack ignores the window's first instants", fw, []Grant{g(1000.5, 1), g(1009.9, 3)}, time.Second, 0},
		{"bucket: 3 at once, then one per 10/3 s", tb, []Grant{g(1000, 3), g(1003.333333334, 1), g(1006.666666667, 1)}, 0, 0},
		{"bucket: a token 1 ns early", tb, []Grant{g(1000, 3), g(1003.333333332, 1)}, 0, 1},
	}
	for _, c := range cases {
		v, err := Check(c.s, c.grants, c.slack)
		if err != nil || len(v) != c.want {
			t.Errorf("%s: %d violations %v, %v; want %d", c.name, len(v), v, err, c.want)
		}
	}
}

// TestModelUsedMatchesAlgorithms: usage per algorithm, buckets of the rolling window included.
func TestModelUsedMatchesAlgorithms(t *testing.T) {
	r := strategy.Rule{Limit: 10, Window: 10 * time.Second}
	rw, _ := rollingwindow.New(r)
	fw, _ := fixedwindow.New(r)
	tb, _ := tokenbucket.New(r)
	recs := []Grant{g(1000.2, 2), g(1000.7, 1), g(1005, 3)}
	for _, c := range []struct {
		s    *engine.Strategy
		at   float64
		want int
	}{
		{rw, 1010.2, 6}, // the bucket [1000, 1001) is held until its latest instant, 1000.7, + 10 s
		{rw, 1010.7, 3},
		{fw, 1009.9, 6},
		{fw, 1010, 0},
		{tb, 1000.7, 3}, // 2 spent at 1000.2, 0.5 back by 1000.7, 1 spent: 2.5 missing, rounded up
		{tb, 1005, 3},   // full again by 1003.2, then 3 spent
	} {
		if got := ModelUsed(c.s, recs, at(c.at))[0]; got != c.want {
			t.Errorf("%s at %v: used %d, want %d", c.s.Name(), c.at, got, c.want)
		}
	}
}

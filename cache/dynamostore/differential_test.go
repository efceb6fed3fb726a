package dynamostore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestSameAsMemory drives the memory store and the DynamoDB store with the same random
// operations (Record, Reserve, Release, Peek, Admit) under each strategy on one manual clock,
// and requires identical answers.
func TestSameAsMemory(t *testing.T) {
	_, c := server(t)
	algs := []engine.Algorithm{storetest.TokenBucket, storetest.FixedWindow, storetest.RollingWindow}
	var iteration atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual(t0.Add(time.Duration(rapid.Int64Range(0, 1e9).Draw(rt, "start µs")) * time.Microsecond))
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		dyn := newStore(t, c, Options{Clock: clk})
		alg := algs[rapid.IntRange(0, len(algs)-1).Draw(rt, "alg")]
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			g := []time.Duration{time.Millisecond, 100 * time.Millisecond}[rapid.IntRange(0, 1).Draw(rt, "unit")]
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit, Granularity: g,
				Window:   time.Duration(rapid.IntRange(1, 50).Draw(rt, "w")) * g * 10,
				Margin:   time.Duration(rapid.IntRange(0, 3).Draw(rt, "m")) * g,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := engine.New(alg, rules...)
		if err != nil {
			rt.Skip(err)
		}
		key := "same-" + strconv.FormatInt(iteration.Add(1), 10)
		storetest.Differential(rt, clk, mem, dyn, s, key, storetest.Ops{Admit: true})
	})
}

func sameDecision(a, b strategy.Decision) bool {
	if a.Allowed != b.Allowed || a.RetryAfter != b.RetryAfter || !a.At.Equal(b.At) || len(a.Rules) != len(b.Rules) {
		return false
	}
	for i := range a.Rules {
		if a.Rules[i] != b.Rules[i] {
			return false
		}
	}
	return true
}

// TestSharedKeySameAsMemory: fixed-window strategies sharing counters, a token bucket and a rolling
// window on ONE key, clock going forwards and backwards, Admit/Record/Peek; every answer as the
// memory store's.
func TestSharedKeySameAsMemory(t *testing.T) {
	_, c := server(t)
	var it atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual(t0.Add(time.Duration(rapid.Int64Range(0, 1e9).Draw(rt, "start µs")) * time.Microsecond))
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		dyn := newStore(t, c, Options{Clock: clk})
		sec := time.Second
		ss := []*engine.Strategy{
			must(fixedwindow.New(strategy.Rule{Limit: 3, Window: 2 * sec}, strategy.Rule{Limit: 5, Window: 10 * sec})),
			must(fixedwindow.New(strategy.Rule{Limit: 4, Window: 2 * sec, Headroom: 1})),
			must(fixedwindow.New(strategy.Rule{Limit: 6, Window: 10 * sec}, strategy.Rule{Limit: 2, Window: time.Second, Margin: time.Second})),
			must(tokenbucket.New(strategy.Rule{Limit: 3, Window: 2 * sec})),
			must(rollingwindow.New(strategy.Rule{Limit: 4, Window: 4 * sec, Granularity: 100 * time.Millisecond})),
		}
		key := "shared-" + strconv.FormatInt(it.Add(1), 10)
		ctx := context.Background()
		for range rapid.IntRange(1, 50).Draw(rt, "ops") {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0:
				clk.Advance(time.Duration(rapid.Int64Range(-2_000_000, 4_000_000).Draw(rt, "µs")) * time.Microsecond)
			case 1, 2:
				s := ss[rapid.IntRange(0, len(ss)-1).Draw(rt, "s")]
				n := rapid.IntRange(1, s.MaxBurst()).Draw(rt, "n")
				a, err1 := mem.Admit(ctx, s, key, n)
				b, err2 := dyn.Admit(ctx, s, key, n)
				if err1 != nil || err2 != nil {
					rt.Fatal(err1, err2)
				}
				if !sameDecision(a, b) {
					rt.Fatalf("admit %v %d:\nmem %+v\ndyn %+v", s, n, a, b)
				}
			case 3:
				s := ss[rapid.IntRange(0, len(ss)-1).Draw(rt, "s")]
				n := rapid.IntRange(1, 3).Draw(rt, "n")
				if err := mem.Record(ctx, s, key, n); err != nil {
					rt.Fatal(err)
				}
				if err := dyn.Record(ctx, s, key, n); err != nil {
					rt.Fatal(err)
				}
			case 4:
				s := ss[rapid.IntRange(0, len(ss)-1).Draw(rt, "s")]
				a, err1 := mem.Peek(ctx, s, key, 1)
				b, err2 := dyn.Peek(ctx, s, key, 1)
				if err1 != nil || err2 != nil {
					rt.Fatal(err1, err2)
				}
				if a.Wait != b.Wait || len(a.Usage) != len(b.Usage) {
					rt.Fatalf("peek %v: mem %+v dyn %+v", s, a, b)
				}
				for i := range a.Usage {
					if a.Usage[i] != b.Usage[i] {
						rt.Fatalf("peek %v: mem %+v dyn %+v", s, a, b)
					}
				}
			}
		}
	})
}

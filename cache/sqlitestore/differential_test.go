package sqlitestore

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestSameAsMemory: random operations under each strategy give the same answers from the
// SQLite store (the upsert for the fixed window, encoded counters for the others) as from the
// memory store, which runs the strategy's own counters.
func TestSameAsMemory(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	sq, _ := open(t, Options{Clock: clk, PruneEvery: 7})
	algs := []strategy.Algorithm{fixedwindow.Algorithm{}, tokenbucket.Algorithm{}, rollingwindow.Algorithm{}}
	var iteration int
	rapid.Check(t, func(rt *rapid.T) {
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		alg := algs[rapid.IntRange(0, len(algs)-1).Draw(rt, "alg")]
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit,
				Window:   time.Duration(rapid.IntRange(1, 30).Draw(rt, "w")) * time.Second,
				Margin:   time.Duration(rapid.IntRange(0, 2).Draw(rt, "m")) * time.Second,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := strategy.New(alg, rules...)
		if err != nil {
			rt.Fatal(err)
		}
		iteration++
		key := "diff-" + strconv.Itoa(iteration)
		type held struct {
			at   time.Time
			left int
		}
		var reservations []held
		for range rapid.IntRange(1, 50).Draw(rt, "ops") {
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				clk.Advance(time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "µs")) * time.Microsecond)
			case 1:
				n := rapid.IntRange(1, 5).Draw(rt, "n")
				if err := errors.Join(mem.Record(ctx, s, key, n), sq.Record(ctx, s, key, n)); err != nil {
					rt.Fatal(err)
				}
			case 2:
				n := rapid.IntRange(1, s.MaxBurst()).Draw(rt, "burst")
				a, err1 := mem.Reserve(ctx, s, key, n)
				b, err2 := sq.Reserve(ctx, s, key, n)
				if err := errors.Join(err1, err2); err != nil {
					rt.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					rt.Fatalf("reserve %d: memory %+v, sqlite %+v", n, a, b)
				}
				if a.Allowed {
					reservations = append(reservations, held{a.At, n})
				}
			case 3:
				if len(reservations) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(reservations)-1).Draw(rt, "which")
				k := rapid.IntRange(1, reservations[i].left).Draw(rt, "k")
				if err := errors.Join(mem.Release(ctx, s, key, reservations[i].at, k), sq.Release(ctx, s, key, reservations[i].at, k)); err != nil {
					rt.Fatal(err)
				}
				if reservations[i].left -= k; reservations[i].left == 0 {
					reservations = append(reservations[:i], reservations[i+1:]...)
				}
			case 4:
				a, err1 := mem.Admit(ctx, s, key, 1)
				b, err2 := sq.Admit(ctx, s, key, 1)
				if err := errors.Join(err1, err2); err != nil {
					rt.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					rt.Fatalf("admit: memory %+v, sqlite %+v", a, b)
				}
			case 5:
				n := rapid.IntRange(0, s.MaxBurst()).Draw(rt, "peek")
				a, err1 := mem.Peek(ctx, s, key, n)
				b, err2 := sq.Peek(ctx, s, key, n)
				if err := errors.Join(err1, err2); err != nil {
					rt.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					rt.Fatalf("peek %d: memory %+v, sqlite %+v", n, a, b)
				}
			}
		}
	})
}

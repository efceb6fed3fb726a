package storetest

import (
	"context"
	"errors"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Store is the part of cache.Store that Differential drives (declared here so that the cache
// package's own tests can use this package).
type Store interface {
	Peeker
	Record(ctx context.Context, s *engine.Strategy, key string, n int) error
	Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error)
	Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error
}

type admitter interface {
	Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error)
}

type syncer interface {
	Sync(ctx context.Context, s *engine.Strategy, key string, u engine.Update) error
}

// Ops says which operations beyond Record, Reserve, Release and Peek Differential draws: Admit
// (both stores must be cache.Admitters) and Sync (both cache.Syncers).
type Ops struct {
	Admit, Sync bool
}

// Differential drives want and got with the same random sequence of operations on key under s,
// moving clk (the clock both stores read) between them, and fails rt at the first answer that
// differs. Instants are compared with Equal, so stores may answer in any time zone.
func Differential(rt *rapid.T, clk *clock.Manual, want, got Store, s *engine.Strategy, key string, ops Ops) {
	ctx := context.Background()
	type held struct {
		at   time.Time
		left int
	}
	var reservations []held
	top := 4
	if ops.Admit {
		top++
	}
	if ops.Sync {
		top++
	}
	for range rapid.IntRange(1, 60).Draw(rt, "ops") {
		op := rapid.IntRange(0, top).Draw(rt, "op")
		if op == 5 && !ops.Admit {
			op = 6
		}
		switch op {
		case 0:
			clk.Advance(time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "µs")) * time.Microsecond)
		case 1:
			n := rapid.IntRange(1, 5).Draw(rt, "n")
			if err := errors.Join(want.Record(ctx, s, key, n), got.Record(ctx, s, key, n)); err != nil {
				rt.Fatal(err)
			}
		case 2:
			n := rapid.IntRange(1, s.MaxBurst()).Draw(rt, "burst")
			a, err1 := want.Reserve(ctx, s, key, n)
			b, err2 := got.Reserve(ctx, s, key, n)
			if err := errors.Join(err1, err2); err != nil {
				rt.Fatal(err)
			}
			if a.Allowed != b.Allowed || a.Wait != b.Wait || !a.At.Equal(b.At) && a.Allowed {
				rt.Fatalf("reserve %d: want %+v, got %+v", n, a, b)
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
			if err := errors.Join(want.Release(ctx, s, key, reservations[i].at, k), got.Release(ctx, s, key, reservations[i].at, k)); err != nil {
				rt.Fatal(err)
			}
			if reservations[i].left -= k; reservations[i].left == 0 {
				reservations = append(reservations[:i], reservations[i+1:]...)
			}
		case 4:
			n := rapid.IntRange(0, s.MaxBurst()).Draw(rt, "peek")
			a, err1 := want.Peek(ctx, s, key, n)
			b, err2 := got.Peek(ctx, s, key, n)
			if err := errors.Join(err1, err2); err != nil {
				rt.Fatal(err)
			}
			if a.Wait != b.Wait || !a.PausedUntil.Equal(b.PausedUntil) || len(a.Usage) != len(b.Usage) {
				rt.Fatalf("peek(%d): want %+v, got %+v", n, a, b)
			}
			for i := range a.Usage {
				x, y := a.Usage[i], b.Usage[i]
				if x.Rule != y.Rule || x.Used != y.Used || x.Remaining != y.Remaining || x.Reported != y.Reported || !x.ReportedAt.Equal(y.ReportedAt) {
					rt.Fatalf("peek(%d), rule %d: want %+v, got %+v", n, i, x, y)
				}
			}
		case 5:
			n := rapid.IntRange(1, s.MaxBurst()).Draw(rt, "admit")
			a, err1 := want.(admitter).Admit(ctx, s, key, n)
			b, err2 := got.(admitter).Admit(ctx, s, key, n)
			if err := errors.Join(err1, err2); err != nil {
				rt.Fatal(err)
			}
			if a.Allowed != b.Allowed || a.RetryAfter != b.RetryAfter || !a.At.Equal(b.At) || len(a.Rules) != len(b.Rules) {
				rt.Fatalf("admit %d: want %+v, got %+v", n, a, b)
			}
			for i := range a.Rules {
				if a.Rules[i] != b.Rules[i] {
					rt.Fatalf("admit %d, rule %d: want %+v, got %+v", n, i, a.Rules[i], b.Rules[i])
				}
			}
		case 6:
			u := engine.Update{Pause: time.Duration(rapid.Int64Range(0, 2_000_000).Draw(rt, "pause µs")) * time.Microsecond}
			for i := range s.NumRules() {
				if rapid.Bool().Draw(rt, "report") {
					r := s.Rule(i)
					used := rapid.IntRange(0, r.Limit+5).Draw(rt, "used")
					reset := time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "reset µs")) * time.Microsecond
					u.Reports = append(u.Reports, engine.Report{Rule: i, Used: used, Remaining: max(0, r.Limit-used), Reset: reset})
				}
			}
			if err := errors.Join(want.(syncer).Sync(ctx, s, key, u), got.(syncer).Sync(ctx, s, key, u)); err != nil {
				rt.Fatal(err)
			}
		}
	}
}

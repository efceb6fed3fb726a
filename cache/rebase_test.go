package cache

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestClockFlipFlopKeepsHoldTime (not fixed; run with RATEMONITOR_BREAK_REPRO=1): 50 requests at t0
// under 100/min; then a clock that steps back 2 s (beyond StepTolerance) and forward 2 s again, 20
// times, with a peek after each back step and one request after each forward step. Each back step
// rebases the key: all its records, the 50 included, move 2 s earlier; the forward step is never
// undone. At t0 + 20 s (the clock reads true time again) 70 requests were sent in the last 20 s, so
// 30 more may go; the store grants more, the 50 having expired 40 s early.
func TestClockFlipFlopKeepsHoldTime(t *testing.T) {
	if os.Getenv("RATEMONITOR_BREAK_REPRO") == "" {
		t.Skip("known defect, not fixed: set RATEMONITOR_BREAK_REPRO=1 to reproduce")
	}
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 100, Window: time.Minute})
	ctx := context.Background()
	if err := m.Record(ctx, s, "k", 50); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		clk.Step(-2 * time.Second)
		if _, err := m.Peek(ctx, s, "k", 1); err != nil {
			t.Fatal(err)
		}
		clk.Step(2 * time.Second)
		if err := m.Record(ctx, s, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(20 * time.Second)
	granted := 0
	for range 100 {
		if res, err := m.Reserve(ctx, s, "k", 1); err == nil && res.Allowed {
			granted++
		}
	}
	// 70 requests were sent in the last 20 s (true time, and the clock reads t0 + 20 s).
	if granted != 30 {
		t.Fatalf("20 s after 70 requests (100/min), with the clock back where it was, %d more granted; want 30", granted)
	}
}

// TestFixedWindowStepBackKeepsWindowEnd (not fixed; run with RATEMONITOR_BREAK_REPRO=1): a fixed
// window of 100/min full at t0 + 50 s (its window ends at t0 + 60 s); the clock is stepped back
// 29 min 55 s. The rebase carries the count into the aligned window that holds the shifted
// instant, which ends 5 s later instead of 10: at t0 + 55 s (true time) the key admits 100
// more, 200 inside one of the upstream's aligned minutes.
func TestFixedWindowStepBackKeepsWindowEnd(t *testing.T) {
	if os.Getenv("RATEMONITOR_BREAK_REPRO") == "" {
		t.Skip("known defect, not fixed: set RATEMONITOR_BREAK_REPRO=1 to reproduce")
	}
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk})
	s, err := fixedwindow.New(strategy.Rule{Limit: 100, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clk.Advance(50 * time.Second)
	if res, err := m.Reserve(ctx, s, "k", 100); err != nil || !res.Allowed {
		t.Fatalf("first 100: %+v, %v", res, err)
	}
	clk.Step(-(29*time.Minute + 55*time.Second))
	if res, err := m.Reserve(ctx, s, "k", 1); err != nil || res.Allowed || res.Wait < 10*time.Second {
		t.Errorf("right after the step: %+v, %v; want refused, wait ≥ 10 s (the window's rest)", res, err)
	}
	clk.Advance(5 * time.Second)
	if res, err := m.Reserve(ctx, s, "k", 100); err != nil || res.Allowed {
		t.Errorf("5 s after the step (true t0 + 55 s, inside the first minute): %+v, %v; want refused", res, err)
	}
}

// TestStepBackKeepsPauseOnlyKeyWait: a key paused for 30 s (Sync, a 429's Retry-After) before
// anything was recorded on it, then the clock stepped back 1 h: the wait is the pause's 30 s, not
// the hour until the clock catches up. Before the fix Rebase looked at the counters only, found
// nothing, and the key was paused for 1 h 0 min 30 s.
func TestStepBackKeepsPauseOnlyKeyWait(t *testing.T) {
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 100, Window: time.Minute})
	ctx := context.Background()
	if err := m.Sync(ctx, s, "k", engine.Update{Pause: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clk.Step(-time.Hour)
	if p, err := m.Peek(ctx, s, "k", 1); err != nil || p.Wait != 30*time.Second {
		t.Errorf("Peek after the step: wait %v, %v; want 30s", p.Wait, err)
	}
	if res, err := m.Reserve(ctx, s, "k", 1); err != nil || res.Allowed || res.Wait != 30*time.Second {
		t.Errorf("Reserve after the step: %+v, %v; want refused, wait 30s", res, err)
	}
	clk.Advance(30 * time.Second)
	if res, err := m.Reserve(ctx, s, "k", 1); err != nil || !res.Allowed {
		t.Errorf("30 s after the step: %+v, %v; want granted", res, err)
	}
}

// TestReleaseAfterRebaseSparesNewerRecords (not fixed; run with RATEMONITOR_BREAK_REPRO=1):
// 5 reserved at t0 (10/min); the clock steps back 2 s and a peek rebases the key (the 5 move
// to t0 − 2 s); 2 s later, the clock at t0 again, another sender records 5 at t0; then the
// reservation is cancelled: Release(at t0, 5) finds the newer 5 in t0's bucket and takes them
// back. The 5 that were sent stop counting at once; at t0 + 58 s the key grants 10, 15 sent
// inside a minute against 10.
func TestReleaseAfterRebaseSparesNewerRecords(t *testing.T) {
	if os.Getenv("RATEMONITOR_BREAK_REPRO") == "" {
		t.Skip("known defect, not fixed: set RATEMONITOR_BREAK_REPRO=1 to reproduce")
	}
	clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 10, Window: time.Minute})
	ctx := context.Background()
	res, err := m.Reserve(ctx, s, "k", 5)
	if err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v, %v", res, err)
	}
	clk.Step(-2 * time.Second)
	if _, err := m.Peek(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	if err := m.Record(ctx, s, "k", 5); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, s, "k", res.At, 5); err != nil {
		t.Fatal(err)
	}
	if u := used(t, m, s, "k"); u[0] != 5 {
		t.Errorf("after the cancel: used %d, want 5 (the 5 sent)", u[0])
	}
	clk.Advance(58 * time.Second)
	if r, err := m.Reserve(ctx, s, "k", 10); err != nil || r.Allowed {
		t.Errorf("at t0 + 58 s, 5 sent at t0 still count: reserve 10 = %+v, %v; want refused", r, err)
	}
}

// TestDropPinnedCheckRaisesHighWater: a refused admission checks
// pinned keys for one no longer at its limit (dropPinned → atLimit), which reads a key's
// counters at the clock's instant. Unless that raises the entry's high-water instant (entry.hw),
// a clock step back of more than StepTolerance from that instant, but less from e.hw, skips the
// Rebase that the strategy on plain counters (Rebase before each operation, as the store did
// before issue 17) does, and the wait told is longer by the step (5.7 s instead of 4.5 s). Both
// ways in: dropPinned called alone, and the real trigger, a new key refused (ErrFull) by a store
// whose MaxCost the pinned key holds.
func TestDropPinnedCheckRaisesHighWater(t *testing.T) {
	for _, viaAdmission := range []bool{false, true} {
		t.Run(map[bool]string{false: "dropPinned", true: "refused admission"}[viaAdmission], func(t *testing.T) {
			clk := &storetest.SteppedClock{Base: clock.NewManual(t0)}
			cfg := MemoryConfig{Clock: clk}
			if viaAdmission {
				cfg.MaxCost = 700 // room for k alone
			}
			m := newMemory(t, cfg)
			s := mustStrategy(t, strategy.Rule{Limit: 5, Window: 10 * time.Second})
			ctx := context.Background()
			ref := s.NewCounters()
			rec := func(n int) {
				if err := m.Record(ctx, s, "k", n); err != nil {
					t.Fatal(err)
				}
				s.Record(ref, clk.Now(), n)
			}
			rec(5) // at its limit: pinned, limitUntil = t0+10s
			clk.Advance(5 * time.Second)
			rec(8) // over the limit; limitUntil (t0+10s) is not recomputed while ahead
			clk.Advance(5500 * time.Millisecond)
			// t0+10.5s: the first 5 have expired, 8 still count: still at its limit.
			if m.pinnedN.Load() != 1 {
				t.Fatalf("%d pinned, want 1", m.pinnedN.Load())
			}
			if viaAdmission {
				if err := m.Record(ctx, s, "other", 1); !errors.Is(err, ErrFull) {
					t.Fatalf("admitting another key: %v, want ErrFull (only k, at its limit, is held)", err)
				}
			} else if m.dropPinned(&shard{}) {
				t.Fatal("dropped a key at its limit")
			}
			s.Wait(ref, clk.Now(), 1)          // what the check did to k's counters: read them at t0+10.5s
			clk.Step(-1200 * time.Millisecond) // back 1.2 s > StepTolerance, from the instant the check read
			now := clk.Now()
			engine.Rebase(ref, nil, now)
			want, _ := s.Reserve(ref, nil, now, 1)
			got, err := m.Reserve(ctx, s, "k", 1)
			if err != nil || got != want {
				t.Fatalf("Reserve after the step = %+v, %v; strategy on plain counters (rebased) %+v", got, err, want)
			}
		})
	}
}

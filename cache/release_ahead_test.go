package cache

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/realclock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestReleaseAheadOfRealClockGrantsNothingEarly (the store reads the real clock before the
// key's lock): a Release whose at lies ahead of the store's clock (a caller's mistake, or an
// instant from another clock) must not move the instant the key's next operations are dated at.
// Log.Remove finds no bucket there and changes nothing; had the Release raised e.hw, the real
// clock's reading, which is dated no earlier than e.hw, would put every later operation in the
// future: the minute's requests would no longer count and a Reserve would be granted while the
// window is still full (early), with Result.At in the future.
func TestReleaseAheadOfRealClockGrantsNothingEarly(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, MemoryConfig{Clock: clock.Real()})
	s := mustStrategy(t, strategy.Rule{Limit: 2, Window: time.Minute})
	for range 2 {
		res, err := m.Reserve(ctx, s, "k", 1)
		if err != nil || !res.Allowed {
			t.Fatalf("reserve: %+v %v", res, err)
		}
	}
	// Nothing was recorded there: Remove finds no bucket and does nothing.
	future := time.Unix(0, realclock.Nanos()).Add(time.Hour)
	if err := m.Release(ctx, s, "k", future, 1); err != nil {
		t.Fatal(err)
	}
	res, err := m.Reserve(ctx, s, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed {
		t.Fatalf("a third request was granted within the minute of two (limit 2): At %v is %v ahead of the clock",
			res.At, res.At.Sub(time.Unix(0, realclock.Nanos())).Round(time.Second))
	}
}

// TestReleaseAheadOfManualClockGrantsNothingEarly is the same on a manual clock, read under the
// key's lock: there e.hw takes the Release's at, and the next reading, more than StepTolerance
// behind it, rebases.
func TestReleaseAheadOfManualClockGrantsNothingEarly(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	m := newMemory(t, MemoryConfig{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 2, Window: time.Minute})
	for range 2 {
		if res, err := m.Reserve(ctx, s, "k", 1); err != nil || !res.Allowed {
			t.Fatalf("reserve: %+v %v", res, err)
		}
	}
	if err := m.Release(ctx, s, "k", clk.Now().Add(time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	res, err := m.Reserve(ctx, s, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed {
		t.Fatalf("granted: %+v", res)
	}
}

// TestReleaseSlightlyAheadOfRealClockGrantsNothingEarly: the same within StepTolerance, where
// no rebase ever mended it: a Release 900 ms ahead must not make the next Reserve decide 900 ms
// ahead (a full window of 800 ms would grant a request right after it filled); the decision
// stays at the clock's reading. The second Reserve may be granted only at an instant the real
// clock had reached when it returned, 800 ms or more after the first grant: what a stall that
// long (a loaded machine) allows; a grant dated ahead of the clock, or sooner, is the defect.
func TestReleaseSlightlyAheadOfRealClockGrantsNothingEarly(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, MemoryConfig{Clock: clock.Real()})
	s := mustStrategy(t, strategy.Rule{Limit: 1, Window: 800 * time.Millisecond, Granularity: 10 * time.Millisecond})
	res, err := m.Reserve(ctx, s, "k", 1)
	if err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if err := m.Release(ctx, s, "k", res.At.Add(900*time.Millisecond), 1); err != nil {
		t.Fatal(err)
	}
	res2, err := m.Reserve(ctx, s, "k", 1)
	after := time.Unix(0, realclock.Nanos())
	if err != nil {
		t.Fatal(err)
	}
	if res2.Allowed && (res2.At.After(after) || after.Sub(res.At) < 800*time.Millisecond) {
		t.Fatalf("granted %v after the first grant in a window of 800 ms, limit 1 (At %v after it)", after.Sub(res.At).Round(time.Millisecond), res2.At.Sub(res.At))
	}
}

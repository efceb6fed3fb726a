package engine_test

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestRebaseShiftsKeyAheadOfClock: a key whose latest instant is more than StepTolerance ahead of
// the store's clock is shifted so that its latest instant is now, under every algorithm, with the
// pause and the report instants; within the tolerance nothing moves.
func TestRebaseShiftsKeyAheadOfClock(t *testing.T) {
	t0 := time.Unix(102_000, 0) // a whole number of minutes
	minute := strategy.Rule{Limit: 10, Window: time.Minute}
	for _, alg := range []engine.Algorithm{storetest.RollingWindow, storetest.FixedWindow, storetest.TokenBucket} {
		t.Run(alg.Name(), func(t *testing.T) {
			s, err := engine.New(alg, minute)
			if err != nil {
				t.Fatal(err)
			}
			cs := s.NewCounters()
			s.Record(cs, t0.Add(10*time.Second), 10) // t0 is aligned: the fixed window is [t0, t0+60)
			up := &engine.Upstream{PausedUntil: t0.Add(40 * time.Second),
				Reported: map[string]engine.Reported{s.CounterID(0): {Remaining: 3, At: t0.Add(10 * time.Second)}}}

			within := t0.Add(10*time.Second - engine.StepTolerance)
			if d := engine.Rebase(cs, up, within); d != 0 || !cs[0].Latest().Equal(t0.Add(10*time.Second)) {
				t.Fatalf("within the tolerance: shift %v, latest %v; want 0, unchanged", d, cs[0].Latest())
			}
			now := t0.Add(10*time.Second - time.Hour)
			if d := engine.Rebase(cs, up, now); d != -time.Hour {
				t.Fatalf("shift = %v, want -1h", d)
			}
			if !cs[0].Latest().Equal(now) || !up.PausedUntil.Equal(t0.Add(40*time.Second-time.Hour)) ||
				!up.Reported[s.CounterID(0)].At.Equal(now) {
				t.Errorf("after the shift: latest %v, paused until %v, reported at %v; want each an hour earlier",
					cs[0].Latest(), up.PausedUntil, up.Reported[s.CounterID(0)].At)
			}
			snap, err := s.Peek(cs, nil, now, 1)
			if err != nil {
				t.Fatal(err)
			}
			// Each algorithm's wait for one slot, as it was before the step: the rolling
			// window's records leave at +60 s, the fixed window ends at t0+60 (the hour is a
			// whole number of windows), the bucket refills a token in 6 s.
			want := map[string]time.Duration{"rollingwindow": time.Minute, "fixedwindow": 50 * time.Second, "tokenbucket": 6 * time.Second}[alg.Name()]
			if snap.Usage[0].Used != 10 || snap.Wait != want {
				t.Errorf("after the step: used %d, wait %v; want 10, %v", snap.Usage[0].Used, snap.Wait, want)
			}
			if d := engine.Rebase(cs, up, now); d != 0 {
				t.Errorf("a second rebase at the same instant shifted by %v", d)
			}
		})
	}
}

// TestWaitMeasuredFromCallersInstant: within StepTolerance a key is answered at its latest instant,
// and every wait is measured from the caller's instant, so that sleeping it on the caller's clock
// is enough: Reserve, Reserve under a pause, Peek and Admit (RetryAfter and Reset).
func TestWaitMeasuredFromCallersInstant(t *testing.T) {
	t0 := time.Unix(100_000, 0)
	s, err := rollingwindow.New(strategy.Rule{Limit: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.NewCounters()
	s.Record(cs, t0, 10)
	behind := t0.Add(-700 * time.Millisecond)
	engine.Rebase(cs, nil, behind)
	res, err := s.Reserve(cs, nil, behind, 1)
	if err != nil || res.Allowed || res.Wait != 60700*time.Millisecond {
		t.Errorf("reserve: %+v %v; want refused, wait 1m0.7s", res, err)
	}
	snap, _ := s.Peek(cs, nil, behind, 1)
	if snap.Wait != 60700*time.Millisecond {
		t.Errorf("peek wait = %v, want 1m0.7s", snap.Wait)
	}
	d, _ := s.Admit(cs, behind, 1)
	if d.Allowed || d.RetryAfter != 60700*time.Millisecond || d.Rules[0].Reset != 60700*time.Millisecond || !d.At.Equal(t0) {
		t.Errorf("admit: %+v; want refused at t0, retry after and reset 1m0.7s", d)
	}
	up := &engine.Upstream{PausedUntil: t0.Add(90 * time.Second)}
	res, _ = s.Reserve(cs, up, behind, 1)
	if res.Wait != 90700*time.Millisecond {
		t.Errorf("reserve under a pause: wait %v, want 1m30.7s", res.Wait)
	}
	// Sleeping the wait told is enough: at behind + 60.7 s the slot is free.
	res, _ = s.Reserve(cs, nil, behind.Add(60700*time.Millisecond), 1)
	if !res.Allowed {
		t.Errorf("reserve after the wait told: %+v, want allowed", res)
	}
}

// TestRebaseShiftsLayeredWindowsTogether: one shift for all of a key's counters. 10 per minute and
// 100 per hour under the fixed window, the minute full at 10:30:10, the clock stepped back 59 min
// (to 09:31:10): both counts carry into the new clock's current windows, so the minute rule waits
// the 50 s to its window's end, not the hour a rounding to whole hours would keep it.
func TestRebaseShiftsLayeredWindowsTogether(t *testing.T) {
	s, err := fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Minute}, strategy.Rule{Limit: 100, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2027, 1, 15, 10, 30, 10, 0, time.UTC)
	cs := s.NewCounters()
	if res, err := s.Reserve(cs, nil, t0, 10); err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	now := t0.Add(-59 * time.Minute)
	if d := engine.Rebase(cs, nil, now); d != -59*time.Minute {
		t.Fatalf("shift = %v, want -59m", d)
	}
	res, err := s.Reserve(cs, nil, now, 1)
	if err != nil || res.Allowed || res.Wait != 50*time.Second {
		t.Fatalf("reserve after the step: %+v %v; want refused, wait 50s", res, err)
	}
	snap, _ := s.Peek(cs, nil, now.Add(50*time.Second), 0)
	if snap.Usage[0].Used != 0 || snap.Usage[1].Used != 10 {
		t.Errorf("at the minute's end: used %d, %d; want 0, 10 (the hour's count carried)", snap.Usage[0].Used, snap.Usage[1].Used)
	}
	if res, err := s.Reserve(cs, nil, now.Add(50*time.Second), 10); err != nil || !res.Allowed {
		t.Errorf("reserve at the minute's end: %+v %v; want allowed", res, err)
	}
}

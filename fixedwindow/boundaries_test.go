package fixedwindow

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestBoundariesExactUnderClockJumps: for windows of 1 s to MaxWindow and windows before and
// after 1970, a window ends exactly at its end instant (RetryAfter 1 ns a nanosecond before);
// a clock back within the window still refuses, and a jump back into the old window is counted
// in the new one, never twice.
func TestBoundariesExactUnderClockJumps(t *testing.T) {
	for _, w := range []time.Duration{time.Second, 7 * time.Second, time.Minute, strategy.MaxWindow} {
		s, err := New(strategy.Rule{Limit: 2, Window: w, Granularity: w})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []int64{-3, -1, 0, 1, 5} {
			end := time.Unix(0, k*int64(w)+int64(w))
			cs := s.NewCounters()
			at := end.Add(-1)
			for i := range 3 {
				d, _ := s.Admit(cs, at, 1)
				if (i < 2) != d.Allowed {
					t.Fatalf("w %v k %d: attempt %d allowed=%v", w, k, i, d.Allowed)
				}
				if !d.Allowed && d.RetryAfter != 1 {
					t.Errorf("w %v k %d: RetryAfter %v at end-1ns", w, k, d.RetryAfter)
				}
			}
			// clock goes back within and before the window: still refused, never counted twice
			d, _ := s.Admit(cs, at.Add(-w/2), 1)
			if d.Allowed {
				t.Errorf("w %v k %d: clock back, admitted", w, k)
			}
			d, _ = s.Admit(cs, end, 1)
			if !d.Allowed || d.Rules[0].Used != 1 {
				t.Errorf("w %v k %d: at the end instant: %+v", w, k, d)
			}
			// a jump back into the old window is counted in the new one
			d, _ = s.Admit(cs, end.Add(-w), 1)
			if !d.Allowed || d.Rules[0].Used != 2 {
				t.Errorf("w %v k %d: back jump: %+v", w, k, d)
			}
			d, _ = s.Admit(cs, end.Add(-w), 1)
			if d.Allowed {
				t.Errorf("w %v k %d: over-admitted after back jump", w, k)
			}
		}
	}
}

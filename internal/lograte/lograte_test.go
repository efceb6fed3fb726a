package lograte

import (
	"testing"
	"time"
)

// TestLimiterAllowsOneLinePerIntervalAndCountsTheRest: the first occurrence is logged, those
// within Every (1 s by default) of the last line logged are held back and counted, and the next
// line logged says how many were held back.
func TestLimiterAllowsOneLinePerIntervalAndCountsTheRest(t *testing.T) {
	var l Limiter
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at         time.Duration
		ok         bool
		suppressed int64
	}{
		{0, true, 0}, {100 * time.Millisecond, false, 0}, {999 * time.Millisecond, false, 0},
		{time.Second, true, 2}, {1500 * time.Millisecond, false, 0}, {5 * time.Second, true, 1}, {6 * time.Second, true, 0},
	}
	for _, s := range steps {
		ok, n := l.Allow(t0.Add(s.at))
		if ok != s.ok || n != s.suppressed {
			t.Fatalf("at %v: %v %d, want %v %d", s.at, ok, n, s.ok, s.suppressed)
		}
	}
}

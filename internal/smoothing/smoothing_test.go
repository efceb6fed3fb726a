package smoothing

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestSmoothBurstAndIntervalExact: the burst and interval of the GCRA that smooths a rule.
func TestSmoothBurstAndIntervalExact(t *testing.T) {
	for _, tc := range []struct {
		r     strategy.Rule
		burst int
		T     time.Duration
	}{
		{strategy.Rule{Limit: 60, Window: time.Minute}, 30, 1935484 * time.Microsecond}, // 60 s / 31, rounded up
		{strategy.Rule{Limit: 1, Window: time.Minute}, 1, time.Minute},
		{strategy.Rule{Limit: 2, Window: time.Minute}, 1, 30 * time.Second},
		{strategy.Rule{Limit: 5, Window: time.Minute}, 3, 20 * time.Second},
		// effective limit 60 and window 62 s
		{strategy.Rule{Limit: 70, Headroom: 10, Window: time.Minute, Margin: 2 * time.Second}, 30, 2 * time.Second},
		{strategy.Rule{Limit: 5000, Window: 24 * time.Hour}, 2500, 34546182 * time.Microsecond}, // 86 400 s / 2501
	} {
		if b, T := Burst(tc.r), Interval(tc.r); b != tc.burst || T != tc.T {
			t.Errorf("%s: burst %d, interval %v; want %d, %v", tc.r, b, T, tc.burst, tc.T)
		}
	}
}

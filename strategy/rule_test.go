package strategy

import (
	"strings"
	"testing"
	"time"
)

// TestGranularityAdvice: a window+margin the granularity does not divide is refused with the
// coarsest granularity that would do (README: Margin 500 ms needs Granularity 500 ms).
func TestGranularityAdvice(t *testing.T) {
	for _, c := range []struct {
		r    Rule
		want string
	}{
		{Rule{Limit: 60, Window: time.Minute, Margin: 500 * time.Millisecond}, "window+margin 1m0.5s is not a whole multiple of the granularity 1s: set Granularity to a divisor of it (such as 500ms)"},
		{Rule{Limit: 5, Window: 1500 * time.Millisecond, Granularity: time.Second}, "(such as 500ms)"},
		{Rule{Limit: 5, Window: 7 * time.Second, Granularity: 2 * time.Second}, "(such as 1s)"},
	} {
		err := c.r.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to say %q", c.r, err, c.want)
		}
	}
}

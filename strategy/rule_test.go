package strategy

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestUndividedWindowRefusedWithAdvice: a window+margin the granularity does not divide is refused with the
// coarsest granularity that would do (README: Margin 500 ms needs Granularity 500 ms).
func TestUndividedWindowRefusedWithAdvice(t *testing.T) {
	for _, c := range []struct {
		r    Rule
		want string
	}{
		{Rule{Limit: 60, Window: time.Minute, Margin: 500 * time.Millisecond}, "window+margin 1m0.5s is not a whole multiple of the granularity 1s (the default for a window+margin that is not a whole number of seconds): set Granularity to a divisor of it (such as 500ms)"},
		{Rule{Limit: 5, Window: 1500 * time.Millisecond, Granularity: time.Second}, "(such as 500ms)"},
		{Rule{Limit: 5, Window: 7 * time.Second, Granularity: 2 * time.Second}, "(such as 1s)"},
	} {
		err := c.r.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to say %q", c.r, err, c.want)
		}
	}
}

// TestDefaultGranularityLargestWholeSecondDivisor: with Granularity unset, Bucket is the largest whole number of seconds
// that divides Window+Margin and is at most max(1 s, (Window+Margin)/60): 1 s up to a minute
// (rollingwindow's worked values are at 1 s), a sixtieth of a window of whole minutes, and 1 s, refused by
// Validate, when Window+Margin is not a whole number of seconds.
func TestDefaultGranularityLargestWholeSecondDivisor(t *testing.T) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		window, margin, gran time.Duration
		want                 time.Duration
		invalid              string // what Validate's error says, or "" when the rule is valid
	}{
		{window: time.Second, want: time.Second},
		{window: 10 * time.Second, want: time.Second},
		{window: 20 * time.Second, margin: 500 * time.Millisecond, gran: 500 * time.Millisecond, want: 500 * time.Millisecond},
		{window: time.Minute, want: time.Second},
		{window: time.Minute, margin: time.Second, want: time.Second},          // Xero's minute: 61 is prime
		{window: 2 * time.Minute, margin: time.Second, want: time.Second},      // 121 = 11·11, and 11 > 121/60
		{window: 2 * time.Minute, want: 2 * time.Second},                       // whole minutes: E/60
		{window: 10 * time.Minute, want: 10 * time.Second},                     // whole minutes: E/60
		{window: time.Hour, want: time.Minute},                                 // whole minutes: E/60
		{window: time.Hour, margin: time.Second, want: 13 * time.Second},       // 3 601 = 13·277
		{window: day, want: 24 * time.Minute},                                  // whole minutes: E/60
		{window: day, margin: time.Second, want: 7 * time.Second},              // 86 401 = 7·12 343
		{window: day, margin: 10 * time.Second, want: 10 * time.Second},        // 86 410 = 10·8 641, 8 641 prime
		{window: day, margin: time.Minute, want: 24*time.Minute + time.Second}, // 86 460 = 60·1 441
		{window: 7 * day, want: 2*time.Hour + 48*time.Minute},
		{window: MaxWindow, want: MaxWindow / 60},
		{window: day, gran: time.Second, want: time.Second},           // asked for: exact 1 s buckets on a day
		{window: day, gran: 10 * time.Second, want: 10 * time.Second}, // asked for
		// A margin over 59 times the window: the default would outgrow the window, so 1 s as before.
		{window: time.Second, margin: time.Hour, want: time.Second},
		{window: 2 * time.Second, margin: 10 * time.Minute, want: time.Second}, // 602: 7 s > 2 s
		// Not a whole number of seconds: 1 s, which Validate refuses with advice.
		{window: 1500 * time.Millisecond, want: time.Second, invalid: "window+margin 1.5s is not a whole multiple of the granularity 1s (the default for a window+margin that is not a whole number of seconds): set Granularity to a divisor of it (such as 500ms)"},
		{window: day, margin: 250 * time.Millisecond, want: time.Second, invalid: "(such as 250ms)"},
		{window: 500 * time.Millisecond, want: time.Second, invalid: "window 500ms is shorter than the granularity 1s"},
		{window: time.Millisecond, want: time.Second, invalid: "window 1ms is shorter than the granularity 1s"},
		{window: 500 * time.Millisecond, gran: 100 * time.Millisecond, want: 100 * time.Millisecond},
		{window: 500 * time.Millisecond, margin: 500 * time.Millisecond, want: time.Second, invalid: "window 500ms is shorter than the granularity 1s"},
	} {
		r := Rule{Limit: 10, Window: c.window, Margin: c.margin, Granularity: c.gran}
		if got := r.Bucket(); got != c.want {
			t.Errorf("%v: Bucket() = %v, want %v", r, got, c.want)
		}
		err := r.Validate()
		switch {
		case c.invalid == "" && err != nil:
			t.Errorf("%v: Validate() = %v, want nil", r, err)
		case c.invalid != "" && (err == nil || !strings.Contains(err.Error(), c.invalid)):
			t.Errorf("%v: Validate() = %v, want an error saying %q", r, err, c.invalid)
		}
	}
}

// largestDivisor is DefaultGranularityFor the slow, obvious way: every candidate from the bound
// down.
func largestDivisor(e time.Duration) time.Duration {
	if e <= 0 || e%time.Second != 0 {
		return time.Second
	}
	n := int64(e / time.Second)
	for d := max(1, n/60); ; d-- {
		if n%d == 0 {
			return time.Duration(d) * time.Second
		}
	}
}

// TestDefaultGranularityForMatchesSearchUpTo6h: DefaultGranularityFor agrees with the obvious search for
// every whole number of seconds up to 6 hours (squares, primes and their products among them),
// and its answer divides the window, is at most max(1 s, e/60), and lets a rule of that window
// validate.
func TestDefaultGranularityForMatchesSearchUpTo6h(t *testing.T) {
	for n := int64(1); n <= 6*3600; n++ {
		e := time.Duration(n) * time.Second
		g := DefaultGranularityFor(e)
		if want := largestDivisor(e); g != want {
			t.Fatalf("DefaultGranularityFor(%v) = %v, want %v", e, g, want)
		}
		if e%g != 0 || g > max(time.Second, e/60) {
			t.Fatalf("DefaultGranularityFor(%v) = %v: it must divide the window and be at most max(1s, %v)", e, g, e/60)
		}
		if err := (Rule{Limit: 1, Window: e}).Validate(); err != nil {
			t.Fatalf("Rule{Window: %v}: %v", e, err)
		}
	}
}

// TestDefaultGranularityForMatchesSearchAtRandom: the same over random windows up to MaxWindow, whole seconds
// and not, and random margins.
func TestDefaultGranularityForMatchesSearchAtRandom(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var e time.Duration
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0: // whole seconds up to 30 days (the obvious search walks e/60 candidates)
			e = time.Duration(rapid.Int64Range(1, 30*86400).Draw(t, "seconds")) * time.Second
		case 1: // a day or a week plus a margin of whole seconds
			e = rapid.SampledFrom([]time.Duration{24 * time.Hour, 7 * 24 * time.Hour}).Draw(t, "window") +
				time.Duration(rapid.Int64Range(0, 3600).Draw(t, "margin"))*time.Second
		default: // anything, down to the nanosecond
			e = time.Duration(rapid.Int64Range(1, int64(MaxWindow)).Draw(t, "ns"))
		}
		g := DefaultGranularityFor(e)
		if e%time.Second != 0 {
			if g != time.Second {
				t.Fatalf("DefaultGranularityFor(%v) = %v, want 1s for a window that is not whole seconds", e, g)
			}
			return
		}
		if e%g != 0 || g > max(time.Second, e/60) || g%time.Second != 0 {
			t.Fatalf("DefaultGranularityFor(%v) = %v: it must be whole seconds, divide the window and be at most max(1s, %v)", e, g, e/60)
		}
		if e <= 30*24*time.Hour+time.Hour {
			if want := largestDivisor(e); g != want {
				t.Fatalf("DefaultGranularityFor(%v) = %v, want %v", e, g, want)
			}
		}
	})
}

// BenchmarkBucket: the cost of Bucket with the default granularity, O(1) for a window of whole
// minutes, a divisor search otherwise.
func BenchmarkBucket(b *testing.B) {
	for _, r := range []Rule{
		{Limit: 60, Window: time.Minute, Margin: time.Second},
		{Limit: 5000, Window: 24 * time.Hour},
		{Limit: 5000, Window: 24 * time.Hour, Margin: time.Minute},
		{Limit: 5000, Window: 24 * time.Hour, Margin: 10 * time.Second},
		{Limit: 5000, Window: MaxWindow - time.Hour, Margin: time.Second},
	} {
		b.Run(r.String(), func(b *testing.B) {
			for range b.N {
				_ = r.Bucket()
			}
		})
	}
}

package rollingwindow_test

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestDefaultGranularityLateness is the lateness bound the docs state for the default
// granularity (Rule.Granularity): for random rules with Granularity unset, from a minute to a
// week plus a margin, and random record instants, a request recorded at s counts at every t
// with s ≤ t < s+W+M (never freed early) and at no t ≥ s+W+M+g, g = Bucket() ≤ max(1 s,
// (W+M)/60) (freed less than g late). It checks Used through the strategy, on a counter
// made by the algorithm (so with the granularity Bucket picks), at each record's edges:
// s+E−1ns, s+E, s+E+g−1ns, s+E+g, and at random instants.
func TestDefaultGranularityLateness(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var window time.Duration
		if rapid.Bool().Draw(t, "minutes") {
			window = time.Duration(rapid.IntRange(1, 7*24*60).Draw(t, "window_min")) * time.Minute
		} else {
			window = time.Duration(rapid.IntRange(1, 7*24*3600).Draw(t, "window_s")) * time.Second
		}
		var margin time.Duration
		switch rapid.IntRange(0, 2).Draw(t, "margin_kind") {
		case 1:
			margin = time.Duration(rapid.IntRange(1, 120).Draw(t, "margin_s")) * time.Second
		case 2:
			margin = time.Duration(rapid.IntRange(1, 10).Draw(t, "margin_min")) * time.Minute
		}
		rule := strategy.Rule{Limit: 1 << 30, Window: window, Margin: margin}
		s, err := rollingwindow.New(rule)
		if err != nil {
			t.Fatalf("%v: %v", rule, err)
		}
		e, g := int64(rule.EffectiveWindow()), int64(rule.Bucket())
		if bound := max(int64(time.Second), e/60); g > bound || e%g != 0 {
			t.Fatalf("%v: default granularity %v: want a divisor of %v at most %v", rule, rule.Bucket(), rule.EffectiveWindow(), time.Duration(bound))
		}

		// Records in time order (an early record after a later query would be counted at the
		// key's latest instant instead, docs/rules.md, which is no part of this bound), over up to
		// three windows from a random offset, so buckets fall anywhere in their granule.
		base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano() + rapid.Int64Range(0, e).Draw(t, "offset")
		type event struct {
			at     int64
			n      int // requests recorded; 0 for a query
			record bool
		}
		var events []event
		for i, k := 0, rapid.IntRange(1, 40).Draw(t, "records"); i < k; i++ {
			at := base + rapid.Int64Range(0, 3*e).Draw(t, "at")
			n := rapid.IntRange(1, 3).Draw(t, "n")
			events = append(events, event{at: at, n: n, record: true})
			for _, q := range []int64{at + e - 1, at + e, at + e + g - 1, at + e + g} {
				events = append(events, event{at: q})
			}
		}
		for i, k := 0, rapid.IntRange(0, 20).Draw(t, "queries"); i < k; i++ {
			events = append(events, event{at: base + rapid.Int64Range(0, 4*e+g).Draw(t, "query")})
		}
		// In time order; at one instant records first, since a request counts at its own s.
		slices.SortStableFunc(events, func(a, b event) int {
			if a.at != b.at {
				return int(min(max(a.at-b.at, -1), 1))
			}
			if a.record != b.record {
				if a.record {
					return -1
				}
				return 1
			}
			return 0
		})

		cs := s.NewCounters()
		var recorded []event
		for _, ev := range events {
			now := time.Unix(0, ev.at)
			if ev.record {
				s.Record(cs, now, ev.n)
				recorded = append(recorded, ev)
				continue
			}
			must, may := 0, 0 // counting for sure (s ≤ t < s+E); counting at most (t < s+E+g)
			for _, r := range recorded {
				if ev.at < r.at+e {
					must += r.n
				}
				if ev.at < r.at+e+g {
					may += r.n
				}
			}
			used := cs[0].Used(now)
			if used < must {
				t.Fatalf("%v (granularity %v): at %v after %d records, %d used, want at least %d: a slot was freed before s+W+M",
					rule, rule.Bucket(), time.Duration(ev.at-base), len(recorded), used, must)
			}
			if used > may {
				t.Fatalf("%v (granularity %v): at %v after %d records, %d used, want at most %d: a slot was held g or more past s+W+M",
					rule, rule.Bucket(), time.Duration(ev.at-base), len(recorded), used, may)
			}
		}
	})
}

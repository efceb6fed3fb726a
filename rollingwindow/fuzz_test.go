package rollingwindow

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// FuzzStrategy drives layered rolling windows with operations decoded from the input and checks
// the window semantics' invariants (docs/rules.md) after each: usage ≥ 0 and never below the reference's; wait within
// [0, longest window]; a wait of zero for n exactly when a reserve of n succeeds; never early.
func FuzzStrategy(f *testing.F) {
	f.Add([]byte{2, 60, 6, 0, 10, 1, 3, 1, 200, 2, 5, 3, 9, 0, 255})
	f.Add([]byte{1, 5, 1, 1, 0, 8, 4, 1, 2, 5, 0, 30, 2, 1})
	f.Add([]byte{3, 1, 1, 0, 3, 30, 2, 7, 200, 5, 0, 1, 1, 2, 1, 0, 9, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			data = data[:4096] // the reference is quadratic: keep each input quick
		}
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		grans := []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second}
		var rules []strategy.Rule
		for range 1 + next()%3 {
			g := grans[next()%len(grans)]
			limit := 1 + next()%100
			rules = append(rules, strategy.Rule{
				Limit:       limit,
				Window:      time.Duration(1+next()) * g,
				Granularity: g,
				Margin:      time.Duration(next()%4) * g,
				Headroom:    next() % limit,
			})
		}
		s, err := New(rules...)
		if err != nil {
			t.Fatalf("valid rules refused: %v", err)
		}
		cs := s.NewCounters()
		ref := &reference{rules: rules}
		var maxG time.Duration
		for _, r := range rules {
			maxG = max(maxG, r.Bucket())
		}
		now := int64(1_700_000_000) * int64(time.Second)
		for len(data) > 0 {
			op, arg := next()%4, next()
			at := time.Unix(0, now)
			switch op {
			case 0:
				now += int64(arg) * int64(arg) * int64(time.Millisecond)
			case 1:
				n := 1 + arg%8
				s.Record(cs, at, n)
				ref.record(now, n)
			case 2, 3:
				n := 1 + arg%s.MaxBurst()
				snap, err := s.Peek(cs, nil, at, n)
				if err != nil {
					t.Fatal(err)
				}
				for i, u := range snap.Usage {
					if u.Used < 0 || u.Remaining < 0 || u.Used < ref.used(now)[i] {
						t.Fatalf("rule %v: usage %+v, reference used %d", rules[i], u, ref.used(now)[i])
					}
				}
				want := ref.wait(now, n)
				if snap.Wait < 0 || snap.Wait > s.Longest() || snap.Wait < want || snap.Wait-want >= maxG {
					t.Fatalf("wait(%d) = %v: outside [0, %v], or not within a granule after the reference's %v", n, snap.Wait, s.Longest(), want)
				}
				if op == 3 {
					res, err := s.Reserve(cs, nil, at, n)
					if err != nil {
						t.Fatal(err)
					}
					if res.Allowed != (snap.Wait == 0) {
						t.Fatalf("reserve(%d) allowed=%v but wait was %v", n, res.Allowed, snap.Wait)
					}
					if res.Allowed {
						ref.record(now, n)
					}
				}
			}
		}
	})
}

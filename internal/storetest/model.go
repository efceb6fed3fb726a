package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Grant is n requests a store counted at its own instant At: a Reserve's Result.At, an Admit's
// Decision.At, or the instant of a Record.
type Grant struct {
	At time.Time
	N  int
}

// Violation is one instant at which a rule held more grants than it allows.
type Violation struct {
	Rule  strategy.Rule
	At    time.Time
	Count int // requests the model counts at At (token bucket: requests in the interval ending at At)
	Allow int // what the rule allows there
	Span  time.Duration
}

// String says which rule, when, and how many counted against how many allowed.
func (v Violation) String() string {
	return fmt.Sprintf("rule %s at %s: %d counted over %v, %d allowed", v.Rule, v.At.UTC().Format(time.RFC3339Nano), v.Count, v.Span, v.Allow)
}

// Check judges grants, in any order, against every rule of s under s's algorithm, keeping every
// instant (no buckets), and returns each instant where a rule was exceeded:
//
//   - rolling window: at every grant instant t, the requests granted in (t−Window, t] (the
//     rule's nominal window: what the upstream counts) are at most EffectiveLimit;
//   - fixed window: in every aligned window [k·W, (k+1)·W) of Unix time (W the effective
//     window, as the fixed window aligns), at most EffectiveLimit;
//   - token bucket: in every interval [a, b] between two grants, at most EffectiveLimit +
//     (b−a)·Limit/W requests (capacity less headroom, plus the refill).
//
// slack loosens the judgement by a known delay between a grant and what is judged (arrivals at
// an upstream, each at most slack after its grant): the rolling window shrinks by slack, a fixed
// window is judged from k·W+slack, and a bucket's interval gains slack of refill. Check returns
// an error for an algorithm it does not know or figures too large for exact arithmetic.
func Check(s *engine.Strategy, grants []Grant, slack time.Duration) ([]Violation, error) {
	g := sorted(grants)
	var out []Violation
	for _, r := range s.Rules() {
		var v []Violation
		var err error
		switch s.Name() {
		case "rollingwindow":
			v = checkRolling(r, g, slack)
		case "fixedwindow":
			v = checkFixed(r, g, slack)
		case "tokenbucket":
			v, err = checkBucket(r, g, slack)
		default:
			return nil, fmt.Errorf("storetest: no model for algorithm %q", s.Name())
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

func sorted(grants []Grant) []Grant {
	g := slices.Clone(grants)
	slices.SortStableFunc(g, func(a, b Grant) int { return a.At.Compare(b.At) })
	return g
}

func checkRolling(r strategy.Rule, g []Grant, slack time.Duration) []Violation {
	w := r.Window - slack
	if w <= 0 {
		return nil // a delay as long as the window: arrivals say nothing about the grants
	}
	var out []Violation
	sum, lo := 0, 0
	for hi := range g {
		sum += g[hi].N
		// Requests at or before t−w have left the window (s counts at t iff s ≤ t < s+w).
		for lo <= hi && !g[lo].At.After(g[hi].At.Add(-w)) {
			sum -= g[lo].N
			lo++
		}
		// Judge after the last grant at this instant: the others at it count too.
		if hi+1 < len(g) && g[hi+1].At.Equal(g[hi].At) {
			continue
		}
		if sum > r.EffectiveLimit() {
			out = append(out, Violation{Rule: r, At: g[hi].At, Count: sum, Allow: r.EffectiveLimit(), Span: w})
		}
	}
	return out
}

func checkFixed(r strategy.Rule, g []Grant, slack time.Duration) []Violation {
	w := r.EffectiveWindow()
	var out []Violation
	for i := 0; i < len(g); {
		start := fixedcount.WindowStart(g[i].At, w)
		sum, j := 0, i
		for ; j < len(g) && fixedcount.WindowStart(g[j].At, w).Equal(start); j++ {
			if g[j].At.Sub(start) >= slack {
				sum += g[j].N
			}
		}
		if sum > r.EffectiveLimit() {
			out = append(out, Violation{Rule: r, At: start, Count: sum, Allow: r.EffectiveLimit(), Span: w - slack})
		}
		i = j
	}
	return out
}

// checkBucket tests, for every grant j, max over i ≤ j of
// (S_j − S_{i−1})·W − (t_j − t_i + slack)·C ≤ L·W in one pass: S prefix sums of requests, W the
// effective window in ns, C the capacity (Limit), L the effective limit.
func checkBucket(r strategy.Rule, g []Grant, slack time.Duration) ([]Violation, error) {
	if len(g) == 0 {
		return nil, nil
	}
	w, c, l := int64(r.EffectiveWindow()), int64(r.Limit), int64(r.EffectiveLimit())
	t0 := g[0].At
	const big = 1 << 62
	var out []Violation
	best := int64(-big) // max over i of t_i·C − S_{i−1}·W
	bestAt := t0
	var s int64
	for _, x := range g {
		t := int64(x.At.Sub(t0))
		if t > big/c || s+int64(x.N) > big/w {
			return nil, fmt.Errorf("storetest: token-bucket figures too large for exact arithmetic (%v, %d requests)", x.At.Sub(t0), s)
		}
		if v := t*c - s*w; v > best {
			best, bestAt = v, x.At
		}
		s += int64(x.N)
		if lhs := s*w - t*c + best - int64(slack)*c; lhs > l*w {
			span := x.At.Sub(bestAt)
			count := 0
			for _, y := range g {
				if !y.At.Before(bestAt) && !y.At.After(x.At) {
					count += y.N
				}
			}
			allow := l + (int64(span+slack)*c)/w
			out = append(out, Violation{Rule: r, At: x.At, Count: count, Allow: int(allow), Span: span})
		}
	}
	return out, nil
}

// ModelUsed returns, per rule of s, what a store must report as used at t after counting recs
// (all dated no later than t, and none before an earlier one's window ended: the suite's
// workloads), following the documented semantics of each algorithm:
//
//   - rolling window: requests are grouped in buckets of the rule's granularity (floor of Unix
//     ns), each held until its latest instant plus the effective window;
//   - fixed window: the requests in the aligned window holding t;
//   - token bucket: the tokens missing from a full bucket at t, rounded up, refilled at
//     Limit per effective window from the instants of recs.
func ModelUsed(s *engine.Strategy, recs []Grant, t time.Time) []int {
	g := sorted(recs)
	out := make([]int, s.NumRules())
	for i, r := range s.Rules() {
		w := r.EffectiveWindow()
		switch s.Name() {
		case "rollingwindow":
			gran := int64(r.Bucket())
			type bucket struct {
				latest time.Time
				n      int
			}
			bs := map[int64]*bucket{}
			for _, x := range g {
				k := floorDiv(x.At.UnixNano(), gran)
				b := bs[k]
				if b == nil {
					b = &bucket{}
					bs[k] = b
				}
				b.n += x.N
				if x.At.After(b.latest) {
					b.latest = x.At
				}
			}
			for _, b := range bs {
				if t.Before(b.latest.Add(w)) {
					out[i] += b.n
				}
			}
		case "fixedwindow":
			start := fixedcount.WindowStart(t, w)
			for _, x := range g {
				if fixedcount.WindowStart(x.At, w).Equal(start) {
					out[i] += x.N
				}
			}
		case "tokenbucket":
			// debt in token·ns, refilled at Limit token·ns per ns.
			var debt int64
			var last time.Time
			refill := func(at time.Time) {
				if !last.IsZero() && at.After(last) {
					debt = max(0, debt-int64(at.Sub(last))*int64(r.Limit))
				}
				if last.IsZero() || at.After(last) {
					last = at
				}
			}
			for _, x := range g {
				refill(x.At)
				debt += int64(x.N) * int64(w)
			}
			refill(t)
			out[i] = int((debt + int64(w) - 1) / int64(w))
		}
	}
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

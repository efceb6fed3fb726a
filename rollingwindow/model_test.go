package rollingwindow

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// reference is the rolling window kept the slow, obvious way: every instant, no buckets.
type reference struct {
	rules []strategy.Rule
	at    []int64 // recorded instants, ns, with repetition
}

func (r *reference) record(t int64, n int) {
	for range n {
		r.at = append(r.at, t)
	}
}

// release removes up to n instants equal to t.
func (r *reference) release(t int64, n int) {
	for i := 0; i < len(r.at) && n > 0; {
		if r.at[i] == t {
			r.at = slices.Delete(r.at, i, i+1)
			n--
			continue
		}
		i++
	}
}

// live returns, sorted, the instants that count at t under rule: s ≤ t < s+W.
func (r *reference) live(rule strategy.Rule, t int64) []int64 {
	var out []int64
	for _, s := range r.at {
		if s <= t && t < s+int64(rule.EffectiveWindow()) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func (r *reference) used(t int64) []int {
	var u []int
	for _, rule := range r.rules {
		u = append(u, len(r.live(rule, t)))
	}
	return u
}

// wait is WaitTime's definition (docs/rules.md#window-semantics) read literally: the smallest d ≥ 0 with used+n ≤ limit in every rule.
func (r *reference) wait(t int64, n int) time.Duration {
	var d time.Duration
	for _, rule := range r.rules {
		live := r.live(rule, t)
		if excess := len(live) + n - rule.EffectiveLimit(); excess > 0 {
			d = max(d, time.Duration(live[excess-1]+int64(rule.EffectiveWindow())-t))
		}
	}
	return d
}

type reservation struct {
	at   int64
	left int
}

// drawRules draws 1–3 layered rules whose granularities all divide step.
func drawRules(t *rapid.T, step time.Duration) []strategy.Rule {
	grans := []time.Duration{step, step / 10, step / 100}
	var rules []strategy.Rule
	for i := range rapid.IntRange(1, 3).Draw(t, "rules") {
		g := grans[rapid.IntRange(0, 2).Draw(t, "g")]
		limit := rapid.IntRange(1, 20).Draw(t, "limit")
		rules = append(rules, strategy.Rule{
			Limit:       limit,
			Window:      time.Duration(rapid.IntRange(1, 40).Draw(t, "window")) * g * 10,
			Granularity: g,
			Margin:      time.Duration(rapid.IntRange(0, 3).Draw(t, "margin")) * g,
			Headroom:    rapid.IntRange(0, limit-1).Draw(t, "headroom"),
		})
		_ = i
	}
	return rules
}

// checkModel drives random records, reservations, releases, queries and clock advances, and
// compares every answer with the reference. With quantized time (every instant a multiple of
// every granularity) each bucket holds one instant and the answers must be equal; otherwise
// they must never be early and at most one granule late.
func checkModel(t *rapid.T, quantized bool) {
	step := 100 * time.Millisecond
	rules := drawRules(t, step)
	s, err := New(rules...)
	if err != nil {
		t.Fatal(err)
	}
	cs := s.NewCounters()
	ref := &reference{rules: rules}
	var maxG time.Duration
	for _, r := range rules {
		maxG = max(maxG, r.Bucket())
	}
	now := int64(1_000_000) * int64(time.Second)
	var held []reservation
	for range rapid.IntRange(1, 150).Draw(t, "ops") {
		at := time.Unix(0, now)
		switch rapid.IntRange(0, 4).Draw(t, "op") {
		case 0: // advance
			if !quantized && len(ref.at) > 0 && rapid.Bool().Draw(t, "edge") {
				// Land next to an edge: a recorded instant + a rule's window, ±1 ns.
				s := ref.at[rapid.IntRange(0, len(ref.at)-1).Draw(t, "instant")]
				w := int64(rules[rapid.IntRange(0, len(rules)-1).Draw(t, "rule")].EffectiveWindow())
				now = max(now, s+w+rapid.Int64Range(-1, 1).Draw(t, "delta"))
			} else if quantized {
				now += int64(rapid.IntRange(0, 40).Draw(t, "steps")) * int64(step)
			} else {
				now += rapid.Int64Range(0, int64(4*time.Second)).Draw(t, "ns")
			}
		case 1: // record (monitoring)
			n := rapid.IntRange(1, 5).Draw(t, "n")
			s.Record(cs, at, n)
			ref.record(now, n)
		case 2: // reserve
			n := rapid.IntRange(1, s.MaxBurst()).Draw(t, "burst")
			want := ref.wait(now, n)
			res, err := s.Reserve(cs, nil, at, n)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				if want != 0 {
					t.Fatalf("reserve %d allowed at %d; the reference waits %v: early", n, now, want)
				}
				ref.record(now, n)
				held = append(held, reservation{at: now, left: n})
			} else if quantized && res.Wait != want || res.Wait < want || res.Wait-want >= maxG {
				t.Fatalf("reserve %d refused with wait %v; reference %v", n, res.Wait, want)
			}
		case 3: // give back part of a reservation
			if len(held) == 0 {
				continue
			}
			i := rapid.IntRange(0, len(held)-1).Draw(t, "which")
			k := rapid.IntRange(1, held[i].left).Draw(t, "k")
			s.Release(cs, time.Unix(0, held[i].at), k)
			ref.release(held[i].at, k)
			if held[i].left -= k; held[i].left == 0 {
				held = slices.Delete(held, i, i+1)
			}
		case 4: // query
			n := rapid.IntRange(1, s.MaxBurst()).Draw(t, "burst")
			snap, err := s.Peek(cs, nil, at, n)
			if err != nil {
				t.Fatal(err)
			}
			want, wantUsed := ref.wait(now, n), ref.used(now)
			for i, u := range snap.Usage {
				if quantized && u.Used != wantUsed[i] || u.Used < wantUsed[i] {
					t.Fatalf("rule %v: used %d, reference %d", rules[i], u.Used, wantUsed[i])
				}
			}
			if quantized && snap.Wait != want {
				t.Fatalf("wait(%d) = %v, reference %v", n, snap.Wait, want)
			}
			if snap.Wait < want || snap.Wait-want >= maxG {
				t.Fatalf("wait(%d) = %v, reference %v: early, or late by a granule or more", n, snap.Wait, want)
			}
		}
	}
}

// TestQuantizedTimeMatchesModelExactly: with every instant a multiple of every granularity,
// each answer equals the model's (checkModel).
func TestQuantizedTimeMatchesModelExactly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkModel(t, true) })
}

// TestAnyTimeWithinAGranuleOfModel: at any instants, each answer is never earlier than the
// model's and at most one granule later (checkModel).
func TestAnyTimeWithinAGranuleOfModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkModel(t, false) })
}

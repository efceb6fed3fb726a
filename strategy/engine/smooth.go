package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/smoothing"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Smoothing: a second check beside every rule that spreads requests out instead of letting a
// long batch drain the window. Each rule (effective limit L, effective window W) gets a GCRA
// (the generic cell rate algorithm of ITU-T I.371, as a "virtual scheduling" rule) with burst
// b = ⌈L/2⌉ and emission interval T = W/(L − b + 1), rounded up to the microsecond (the Redis
// store's resolution, so that every store answers alike). From idle, b requests go at once;
// after that one goes every T. No W-long span can hold more than b + (L − b + 1) − 1 = L of the
// GCRA's grants, so the GCRA alone never exceeds the rule; the rule's own counter still decides
// (a request is granted only when both admit, and the wait is the longer of the two). Under a
// long batch every window then holds L − b + 1 requests (31 of 60 for 60 per minute): about
// half the allocation stays free for other callers, at the price of half the throughput.

// ErrNotSmoothable is wrapped by Smoothed for a strategy whose algorithm does not declare that
// its counters may be smoothed (Smoothable, see Algorithm).
var ErrNotSmoothable = errors.New("strategy cannot be smoothed")

// smoothable is an Algorithm whose strategies may be smoothed (the rolling window). The fixed
// window and the token bucket are not: the stores keep their state in layouts that have no room
// for the GCRA.
type smoothable interface {
	Smoothable() bool
}

// Smoothed returns s with a GCRA beside every rule (see the package's smoothing notes above):
// Reserve, Admit, Wait and Peek's wait then also wait for the GCRA, Record and Release also
// charge and refund it, and a burst larger than a rule's GCRA burst b can never fit
// (CheckBurst). The GCRAs are extra slots after the rules' own, each a Counter like the
// others (so a store that keeps counters by CounterID keeps them too), named
// "gcra:<interval ns>:<burst>"; rules whose GCRAs are alike share one. It returns s itself
// when s is already smoothed, and an error wrapping ErrNotSmoothable when s's algorithm is not
// smoothable (Smoothable, see Algorithm).
func (s *Strategy) Smoothed() (*Strategy, error) {
	if s.smoothFrom > 0 {
		return s, nil
	}
	if sm, ok := s.alg.(smoothable); !ok || !sm.Smoothable() {
		return nil, fmt.Errorf("%w: the %s algorithm keeps no room for a GCRA; smoothing works with the rolling window", ErrNotSmoothable, s.alg.Name())
	}
	c := *s
	c.ids = append([]string(nil), s.ids...)
	c.firstOf = append([]int(nil), s.firstOf...)
	c.smoothFrom = len(c.ids)
	for i, r := range s.rules {
		id := gcraID(r)
		slot := -1
		for j := c.smoothFrom; j < len(c.ids); j++ {
			if c.ids[j] == id {
				slot = j // rules whose GCRAs are alike share one
			}
		}
		if slot < 0 {
			c.ids = append(c.ids, id)
			c.firstOf = append(c.firstOf, i)
		}
	}
	c.maxBurst = c.MaxBurst()
	return &c, nil
}

// Smoothing reports whether s was made by Smoothed.
func (s *Strategy) Smoothing() bool { return s.smoothFrom > 0 }

// SmoothSlot reports whether slot j (0 ≤ j < Slots()) holds a GCRA rather than a rule's own
// counter, and if so its emission interval and burst: what a store that keeps counters in its
// own form (the Redis store's script) needs.
func (s *Strategy) SmoothSlot(j int) (interval time.Duration, burst int, ok bool) {
	if s.smoothFrom == 0 || j < s.smoothFrom {
		return 0, 0, false
	}
	r := s.rules[s.firstOf[j]]
	return smoothing.Interval(r), smoothing.Burst(r), true
}

// smoothed returns sub smoothed as s is (sub is made from some of s's rules, or scaled ones).
func (s *Strategy) smoothed(sub *Strategy) *Strategy {
	if s.smoothFrom == 0 || sub == nil {
		return sub
	}
	if sm, err := sub.Smoothed(); err == nil {
		return sm
	}
	return sub // unreachable: sub has s's algorithm
}

// smoothWait is the longest GCRA wait for a burst of n at now (0 when s is not smoothed).
func (s *Strategy) smoothWait(cs []Counter, now time.Time, n int) time.Duration {
	var d time.Duration
	for j := s.smoothFrom; s.smoothFrom > 0 && j < len(s.ids); j++ {
		d = max(d, cs[j].WaitTime(now, n, 0))
	}
	return d
}

// checkSmoothBurst refuses a burst no GCRA of s lets through at once.
func (s *Strategy) checkSmoothBurst(n int) error {
	if s.smoothFrom == 0 {
		return nil
	}
	for _, r := range s.rules {
		if b := smoothing.Burst(r); n > b {
			return fmt.Errorf("%w: a burst of %d can never fit the smoothing of rule %s, which lets at most %d go at once",
				strategy.ErrBurstTooLarge, n, r, b)
		}
	}
	return nil
}

func gcraID(r strategy.Rule) string {
	return "gcra:" + strconv.FormatInt(int64(smoothing.Interval(r)), 10) + ":" + strconv.Itoa(smoothing.Burst(r))
}

// gcra is the smoothing Counter of one rule and one key: its theoretical arrival time (TAT),
// the instant at which the GCRA is idle again, and the latest instant it has seen. A burst of
// n fits at t when max(TAT, t) + n·T ≤ t + b·T; recording it moves TAT to max(TAT, t) + n·T,
// never beyond t + b·T (monitoring past the burst is not remembered: the rule's own counter
// still counts it). The zero GCRA is not usable; Strategy.NewCounter makes them. Not safe for
// concurrent use.
type gcra struct {
	interval int64 // T, ns
	burst    int64 // b
	tat      int64 // ns; meaningful when seen
	hw       int64 // latest instant seen, ns
	seen     bool
}

// newGCRA returns an idle GCRA with emission interval T > 0 and burst b ≥ 1.
func newGCRA(interval time.Duration, burst int) *gcra {
	return &gcra{interval: int64(interval), burst: int64(burst)}
}

func (g *gcra) advance(t int64) int64 {
	if !g.seen {
		g.hw, g.tat, g.seen = t, t, true
	} else if t > g.hw {
		g.hw = t
	}
	return g.hw
}

// span is b·T, the farthest TAT may lie past the GCRA's time.
func (g *gcra) span() int64 { return g.burst * g.interval }

// Add charges n requests at now (at the latest instant seen, if later).
func (g *gcra) Add(now time.Time, n int) {
	t := g.advance(now.UnixNano())
	base := max(g.tat, t)
	if int64(n) >= g.burst {
		g.tat = t + g.span()
		return
	}
	g.tat = min(base+int64(n)*g.interval, t+g.span())
}

// Remove refunds n requests charged at instant at: TAT moves back by n·T, but not before the
// GCRA's time. A charge older than b·T has been paid off already and refunds nothing.
func (g *gcra) Remove(at time.Time, n int) {
	if !g.seen || at.UnixNano()+g.span() <= g.hw {
		return
	}
	back := g.span()
	if int64(n) < g.burst {
		back = int64(n) * g.interval
	}
	g.tat = max(g.tat-back, g.hw)
}

// Used returns how many requests the GCRA still holds at now: ⌈(TAT − now)/T⌉, at least 0.
func (g *gcra) Used(now time.Time) int {
	t := g.advance(now.UnixNano())
	if g.tat <= t {
		return 0
	}
	return int((g.tat - t + g.interval - 1) / g.interval)
}

// WaitTime returns how long until a burst of n (1 ≤ n ≤ b) fits: max(0, TAT + n·T − b·T −
// now), measured from the later of now and the latest instant seen. limit is not used: the
// GCRA has its own burst.
func (g *gcra) WaitTime(now time.Time, n, _ int) time.Duration {
	t := g.advance(now.UnixNano())
	return time.Duration(max(0, max(g.tat, t)+int64(n)*g.interval-g.span()-t))
}

// Expiry returns TAT, from which the GCRA is idle; the zero time when nothing was charged.
func (g *gcra) Expiry() time.Time {
	if !g.seen {
		return time.Time{}
	}
	return time.Unix(0, g.tat)
}

// Latest returns the latest instant seen, or the zero time.
func (g *gcra) Latest() time.Time {
	if !g.seen {
		return time.Time{}
	}
	return time.Unix(0, g.hw)
}

// Cost is the GCRA's size in bytes.
func (g *gcra) Cost() int { return 48 }

// Shift moves TAT and the latest instant by d.
func (g *gcra) Shift(d time.Duration) {
	if g.seen {
		g.tat += int64(d)
		g.hw += int64(d)
	}
}

// gcraFormat is the first byte of an encoded GCRA.
const gcraFormat = 'g'

// MarshalBinary encodes the GCRA's state (not its interval and burst, which come from the
// rule), for stores that keep counters as bytes. It never fails.
func (g *gcra) MarshalBinary() ([]byte, error) {
	b := []byte{gcraFormat, 0}
	if g.seen {
		b[1] = 1
		b = binary.AppendVarint(b, g.hw)
		b = binary.AppendVarint(b, g.tat)
	}
	return b, nil
}

// UnmarshalBinary replaces the state with what MarshalBinary encoded. Data of another format,
// truncated, with trailing bytes, or with a TAT that no operation could leave (more than b·T
// past the latest instant) returns an error and changes nothing.
func (g *gcra) UnmarshalBinary(data []byte) error {
	bad := func(why string) error { return fmt.Errorf("strategy: cannot decode GCRA state: %s", why) }
	if len(data) < 2 || data[0] != gcraFormat || data[1] > 1 {
		return bad("unknown format")
	}
	if data[1] == 0 {
		if len(data) != 2 {
			return bad("trailing bytes")
		}
		*g = gcra{interval: g.interval, burst: g.burst}
		return nil
	}
	hw, k := binary.Varint(data[2:])
	if k <= 0 {
		return bad("truncated")
	}
	tat, k2 := binary.Varint(data[2+k:])
	if k2 <= 0 {
		return bad("truncated")
	}
	if 2+k+k2 != len(data) {
		return bad("trailing bytes")
	}
	if tat > hw && tat-hw > g.span() {
		return bad("theoretical arrival time too far ahead")
	}
	g.hw, g.tat, g.seen = hw, tat, true
	return nil
}

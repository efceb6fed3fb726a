// Package fixedcount is the fixed window's counter (package fixedwindow makes the strategies),
// for the stores that keep it in a form of their own.
package fixedcount

import (
	"time"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// WindowStart returns the start of the aligned window of length w that holds t: the largest
// k·w ≤ t, counted from the Unix epoch. w must be positive.
func WindowStart(t time.Time, w time.Duration) time.Time {
	return time.Unix(0, floorDiv(t.UnixNano(), int64(w))*int64(w)).UTC()
}

// Counter is the fixed-window engine.Counter for one rule and one key: the count of the
// current window, and the latest instant seen. The zero Counter is not usable; make one with
// NewCounter. A Counter is not safe for concurrent use.
type Counter struct {
	window int64 // ns
	start  int64 // start of the window count belongs to (ns); valid when count > 0
	count  int64
	hw     int64 // latest instant seen (ns)
	seen   bool
}

// NewCounter returns an empty counter for windows of length w > 0.
func NewCounter(w time.Duration) *Counter { return &Counter{window: int64(w)} }

// State returns the window start and count in force at the latest instant seen, for stores
// that keep the counter in their own form. The count is 0 when that window has nothing.
func (c *Counter) State() (start time.Time, count int64) {
	c.advance(c.hw)
	return time.Unix(0, c.start).UTC(), c.count
}

// SetState puts back a window start, count and latest instant read from a store.
func (c *Counter) SetState(start time.Time, count int64, latest time.Time) {
	c.start, c.count = floorDiv(start.UnixNano(), c.window)*c.window, max(0, count)
	if !latest.IsZero() {
		c.hw, c.seen = latest.UnixNano(), true
	}
	c.advance(c.hw)
}

// advance moves the counter's time to t if t is later, starting a new window when t has
// left the current one, and returns the counter's time.
func (c *Counter) advance(t int64) int64 {
	if !c.seen || t > c.hw {
		c.hw, c.seen = t, true
	}
	if c.count > 0 && c.hw >= c.start+c.window {
		c.count = 0
	}
	return c.hw
}

// Add counts n attempts at instant now, in the window that holds the later of now and the
// latest instant seen: an attempt dated in a window that has already ended there counts in
// the current window instead, never dropped (docs/rules.md#window-semantics).
func (c *Counter) Add(now time.Time, n int) {
	hw := c.advance(now.UnixNano())
	if c.count == 0 {
		c.start = floorDiv(hw, c.window) * c.window
	}
	c.count += int64(n)
}

// Shift moves the counter's latest instant by d, and carries the current window's count into
// the aligned window that holds the shifted latest instant. Windows are aligned to the clock,
// so the carried count ends with that window, which may be up to one window sooner or later
// than the unaligned shifted end; what it never does is start afresh: a window's limit is not
// admitted a second time because the clock went back.
func (c *Counter) Shift(d time.Duration) {
	if !c.seen {
		return
	}
	c.advance(c.hw)
	c.hw += int64(d)
	if c.count > 0 {
		c.start = floorDiv(c.hw, c.window) * c.window
	}
}

// Remove takes back up to n attempts counted in the window that holds at, if that window is
// still the current one.
func (c *Counter) Remove(at time.Time, n int) {
	c.advance(c.hw)
	if c.count > 0 && floorDiv(at.UnixNano(), c.window)*c.window == c.start {
		c.count -= min(int64(n), c.count)
	}
}

// Used returns the count of the window that holds now (or the latest instant seen, if later).
func (c *Counter) Used(now time.Time) int {
	c.advance(now.UnixNano())
	return int(c.count)
}

// WaitTime returns 0 when n more fit the current window, and otherwise the time until it ends:
// the next window starts empty. It is measured from the later of now and the latest instant
// seen.
func (c *Counter) WaitTime(now time.Time, n, limit int) time.Duration {
	t := c.advance(now.UnixNano())
	if c.count+int64(n) <= int64(limit) {
		return 0
	}
	return time.Duration(c.start + c.window - t)
}

// Expiry returns the end of the current window when it counts anything, else the zero time.
func (c *Counter) Expiry() time.Time {
	if c.count == 0 {
		return time.Time{}
	}
	return time.Unix(0, c.start+c.window)
}

// Latest returns the latest instant the counter has seen, or the zero time.
func (c *Counter) Latest() time.Time {
	if !c.seen {
		return time.Time{}
	}
	return time.Unix(0, c.hw)
}

// Cost returns the approximate bytes the counter holds.
func (c *Counter) Cost() int { return 48 }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Is reports whether s layers its rules under the fixed window: for stores that keep fixed
// windows in a form of their own (an upsert, an ADD) and everything else as encoded counters.
func Is(s *engine.Strategy) bool { return s.Name() == "fixedwindow" }

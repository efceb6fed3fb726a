// Package standin holds local stand-ins for popular APIs, for tests: each is an http.Handler
// that enforces the API's documented limits strictly, on a clock the test gives (a manual
// clock, for virtual time), and answers with that API's header fields, status codes and bodies
// as its documentation describes. Each counts what it accepted and refused.
//
// They are not the APIs: only the rate-limit behaviour is imitated, every other request
// succeeds with a small body.
package standin

import (
	"net/http"
	"sync"
	"time"
)

// Counts is what a stand-in did: requests accepted and refused (a rate-limit answer).
type Counts struct {
	mu       sync.Mutex
	accepted int
	refused  int
	first    time.Time
	last     time.Time
}

func (c *Counts) accept(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.accepted == 0 {
		c.first = now
	}
	c.accepted++
	c.last = now
}

func (c *Counts) refuse() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused++
}

// Accepted returns the requests accepted, and the instants of the first and the last.
func (c *Counts) Accepted() (n int, first, last time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accepted, c.first, c.last
}

// Refused returns the requests refused for a rate limit.
func (c *Counts) Refused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

// rolling is a strict rolling window: a request accepted at a counts at t while t < a+w.
type rolling struct {
	limit int
	w     time.Duration
	log   []time.Time
}

// used drops what has expired at now and returns what counts, and when the oldest frees.
func (r *rolling) used(now time.Time) (int, time.Time) {
	i := 0
	for i < len(r.log) && !now.Before(r.log[i].Add(r.w)) {
		i++
	}
	r.log = r.log[i:]
	if len(r.log) == 0 {
		return 0, now
	}
	return len(r.log), r.log[0].Add(r.w)
}

// room reports whether one more fits at now, and if not, how long until it does.
func (r *rolling) room(now time.Time) (bool, time.Duration) {
	n, free := r.used(now)
	if n < r.limit {
		return true, 0
	}
	return false, free.Sub(now)
}

func (r *rolling) add(now time.Time) { r.log = append(r.log, now) }

func (r *rolling) remaining(now time.Time) int {
	n, _ := r.used(now)
	return max(0, r.limit-n)
}

// fixed is a fixed window: limit calls in each span of w that starts at offset plus a whole
// number of w; the count starts again at each such start.
type fixed struct {
	limit  int
	w      time.Duration
	offset time.Duration
	start  time.Time // the current window's start
	n      int
}

// roll moves the window to the one now falls in.
func (f *fixed) roll(now time.Time) {
	since := now.Sub(time.Unix(0, 0).Add(f.offset))
	start := now.Add(-(since % f.w))
	if since%f.w < 0 {
		start = start.Add(-f.w)
	}
	if !start.Equal(f.start) {
		f.start, f.n = start, 0
	}
}

// room reports whether one more fits at now, and if not, how long until the window resets.
func (f *fixed) room(now time.Time) (bool, time.Duration) {
	f.roll(now)
	if f.n < f.limit {
		return true, 0
	}
	return false, f.start.Add(f.w).Sub(now)
}

func (f *fixed) add(now time.Time) { f.roll(now); f.n++ }

func (f *fixed) remaining(now time.Time) int {
	f.roll(now)
	return max(0, f.limit-f.n)
}

// seconds rounds d up to whole seconds, as delay-seconds are written.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// date sets the Date field from the stand-in's clock, as a server does from its own.
func date(w http.ResponseWriter, now time.Time) {
	w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
}

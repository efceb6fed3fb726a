// Package lograte lets a component log a recurring warning at most once per interval, with
// how many occurrences the interval held, so that a failure hit by every request (a store
// that is down) cannot flood the log.
package lograte

import (
	"sync"
	"time"
)

// Limiter allows one log line per Every. The zero Limiter allows one per second. It is safe
// for concurrent use.
type Limiter struct {
	Every time.Duration // 1 s when zero

	mu         sync.Mutex
	last       time.Time // wall time of the last line allowed
	suppressed int64     // occurrences since then, not logged
}

// Allow reports whether an occurrence at now may be logged and, when it may, how many
// occurrences were held back since the last line (this one not included).
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed int64) {
	every := l.Every
	if every <= 0 {
		every = time.Second
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < every {
		l.suppressed++
		return false, 0
	}
	suppressed, l.suppressed, l.last = l.suppressed, 0, now
	return true, suppressed
}

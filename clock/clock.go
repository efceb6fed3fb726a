// Package clock is the time source of ratemonitor: the real monotonic clock by default, and a
// manual clock that tests move by hand.
package clock

import (
	"context"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/realclock"
)

// Clock tells the time and sleeps. Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current instant.
	Now() time.Time
	// Sleep returns nil after d has passed on this clock, or ctx.Err() as soon as ctx is done,
	// whichever is first. It leaves no timer or goroutine behind. d ≤ 0 returns at once.
	Sleep(ctx context.Context, d time.Duration) error
}

// Real returns the process's monotonic clock: instants are the wall time at process start plus
// the monotonic time elapsed since, so a wall-clock step (NTP, a manual change) cannot move them
// backwards or forwards. All Real clocks of a process agree.
func Real() Clock { return realclock.Monotonic{} }

// Manual is a Clock that moves only when told to, for tests. With Auto set, Sleep moves the clock
// forward by the duration asked for and returns at once (simulated time); otherwise Sleep
// blocks until Advance or Set reaches its deadline.
//
// The zero Manual stands at the zero time.Time; it is safe for concurrent use.
type Manual struct {
	// Auto makes Sleep advance the clock instead of blocking. Set it before first use.
	Auto bool

	mu      sync.Mutex
	now     time.Time
	sleeper []sleeper
}

type sleeper struct {
	until time.Time
	wake  chan struct{}
}

// NewManual returns a Manual clock standing at t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now returns the clock's instant.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the clock forward by d (d < 0 is ignored) and wakes the sleepers it reaches.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(m.now.Add(d))
}

// Set moves the clock to t if t is later than the clock's instant, waking the sleepers it reaches.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.After(m.now) {
		m.setLocked(t)
	}
}

func (m *Manual) setLocked(t time.Time) {
	m.now = t
	kept := m.sleeper[:0]
	for _, s := range m.sleeper {
		if t.Before(s.until) {
			kept = append(kept, s)
		} else {
			close(s.wake)
		}
	}
	m.sleeper = kept
}

// Sleepers returns how many Sleep calls are blocked, so a test can wait for them before
// advancing.
func (m *Manual) Sleepers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sleeper)
}

// Next returns the earliest instant a blocked Sleep waits for, and false when none is blocked.
func (m *Manual) Next() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sleeper) == 0 {
		return time.Time{}, false
	}
	next := m.sleeper[0].until
	for _, s := range m.sleeper[1:] {
		if s.until.Before(next) {
			next = s.until
		}
	}
	return next, true
}

// Sleep waits until the clock reaches now+d (see Manual for Auto) or ctx is done.
func (m *Manual) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	m.mu.Lock()
	if m.Auto {
		m.setLocked(m.now.Add(d))
		m.mu.Unlock()
		return nil
	}
	s := sleeper{until: m.now.Add(d), wake: make(chan struct{})}
	m.sleeper = append(m.sleeper, s)
	m.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		for i, x := range m.sleeper {
			if x.wake == s.wake {
				m.sleeper = append(m.sleeper[:i], m.sleeper[i+1:]...)
				break
			}
		}
		m.mu.Unlock()
		return ctx.Err()
	}
}

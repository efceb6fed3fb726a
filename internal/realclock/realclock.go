// Package realclock holds the clocks behind clock.Real, for the stores of this repository: the
// process's monotonic clock, its reading as int64 nanoseconds, and the host's wall clock.
package realclock

import (
	"context"
	"time"
)

// origin anchors every Monotonic clock of the process to one wall-clock reading.
var origin = time.Now()

// originNs is origin in Unix nanoseconds.
var originNs = origin.UnixNano()

// Monotonic is the clock clock.Real returns: instants are the wall time at process start plus
// the monotonic time elapsed since, so a wall-clock step cannot move them. All agree.
type Monotonic struct{}

// Now returns the current instant.
func (Monotonic) Now() time.Time { return origin.Add(time.Since(origin)) }

// Sleep returns nil after d, or ctx.Err() as soon as ctx is done; d ≤ 0 returns at once.
func (Monotonic) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Nanos returns Monotonic{}.Now().UnixNano() without making a time.Time, for hot paths that
// keep instants as int64.
func Nanos() int64 { return originNs + int64(time.Since(origin)) }

// Is reports whether c is Monotonic: the clock that never goes back, whose instants Nanos reads.
func Is(c any) bool {
	_, ok := c.(Monotonic)
	return ok
}

// Wall is the host's wall clock (time.Now without its monotonic reading): what every process on
// a host agrees on, for stores that several processes share without a clock of their own (the
// SQLite and DynamoDB stores' default). It follows the system clock's steps, backwards too; the
// strategies never let a key's time go backwards, so a step back only delays answers. Sleep is
// Monotonic's.
type Wall struct{ Monotonic }

// Now returns time.Now() without its monotonic reading.
func (Wall) Now() time.Time { return time.Now().Round(0) }

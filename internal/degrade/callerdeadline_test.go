package degrade

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// passedDeadline is a context whose deadline has passed while its timer has not yet fired
// (Err is still nil): what a store call sees when the connection's deadline, set to the
// context's, fires first.
type passedDeadline struct{ context.Context }

func (passedDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Microsecond), true }

// TestCallerDeadlineIsNeverAnOutage: a store error that comes once the caller's deadline has
// passed is the caller's, even before ctx.Err says so; the same error with time left, or
// without a deadline, is the store's.
func TestCallerDeadlineIsNeverAnOutage(t *testing.T) {
	timeout := fmt.Errorf("redis store: reserve on key %q: the client timed out after 2ms: i/o timeout", "k")
	future, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"deadline passed, timer not yet fired", passedDeadline{context.Background()}, timeout, false},
		{"context ended", ended, timeout, false},
		{"deadline an hour away", future, timeout, true},
		{"no deadline", context.Background(), timeout, true},
		{"no deadline, connection refused", context.Background(), errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
	} {
		if got := IsOutage(c.ctx, c.err); got != c.want {
			t.Errorf("%s: isOutage = %v, want %v", c.name, got, c.want)
		}
	}
}

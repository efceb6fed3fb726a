package realclock_test

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/realclock"
)

// TestRealNanosReadsRealClock: Nanos reads the instant clock.Real().Now() would, as Unix
// nanoseconds, and Is names that clock alone.
func TestRealNanosReadsRealClock(t *testing.T) {
	before := clock.Real().Now().UnixNano()
	got := realclock.Nanos()
	after := clock.Real().Now().UnixNano()
	if got < before || got > after {
		t.Fatalf("Nanos %d, want within [%d, %d] of clock.Real().Now()", got, before, after)
	}
	if !realclock.Is(clock.Real()) || realclock.Is(realclock.Wall{}) || realclock.Is(clock.NewManual(time.Unix(0, 0))) || realclock.Is(nil) {
		t.Fatal("Is must hold for clock.Real() alone")
	}
}

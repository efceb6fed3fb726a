package storetest

import (
	"slices"
	"testing"
	"time"
)

// TestGrantLogKeepsHeldSlotsInOrder: slots noted out of order come back sorted, a release takes
// back exactly the count given at that instant, and releasing a slot never noted changes nothing.
func TestGrantLogKeepsHeldSlotsInOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var g GrantLog
	g.Granted(t0.Add(2*time.Second), 1)
	g.Granted(t0, 3)
	g.Released(t0, 2)
	g.Released(t0.Add(time.Hour), 1)
	want := []time.Time{t0, t0.Add(2 * time.Second)}
	if got := g.Instants(); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("Instants() = %v, want %v", got, want)
	}
}

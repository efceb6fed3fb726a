package tokenbucket

import (
	"testing"
	"time"
)

// TestRemoveGivesBackOnlyWhatIsStillOwed: n tokens given back for a spend at at are n less the
// refill since at, and none once the refill covered them.
// A bucket of 10 refilled at 1 a second; 5 spent at 100 s, 10 more at 100 s + later, then 4 (or
// 5) of the first 5 given back.
func TestRemoveGivesBackOnlyWhatIsStillOwed(t *testing.T) {
	cases := []struct {
		name  string
		later time.Duration
		give  int
		want  int // used at 100 s + later, after the give-back
	}{
		{"at once: all 4 back", 0, 4, 11},                 // 15 − 4
		{"2 s later: 4 − 2 back", 2 * time.Second, 4, 11}, // 3 + 10 − 2
		{"3 s later: 4 − 3 back", 3 * time.Second, 4, 11}, // 2 + 10 − 1
		{"refill covered it exactly: none back", 5 * time.Second, 5, 10},
		{"refilled to full since: none back", 11 * time.Second, 4, 10},
	}
	for _, c := range cases {
		b := NewBucket(10, 10*time.Second)
		b.Add(sec(100), 5)
		b.Add(sec(100).Add(c.later), 10)
		b.Remove(sec(100), c.give)
		if got := b.Used(sec(100).Add(c.later)); got != c.want {
			t.Errorf("%s: used %d, want %d", c.name, got, c.want)
		}
	}
	// a zero instant, or one after the latest seen, gives back all of n
	b := NewBucket(10, 10*time.Second)
	b.Add(sec(100), 8)
	b.Remove(time.Time{}, 3)
	b.Remove(sec(200), 2)
	if got := b.Used(sec(100)); got != 3 {
		t.Errorf("zero and later instants: used %d, want 3", got)
	}
}

package rollinglog

import (
	"testing"
	"time"
)

// TestCapEndsEveryBucketByTheInstant: a log of a 60 s window in 1 s buckets holds 3 at 0 s, 4
// at 10.5 s and 5 at 50 s. Capped at 70 s, the first bucket keeps its own end (60 s), the others
// end at 70 s (dated 10 s: the 10.5 s bucket and the 50 s one merge there); capped at or
// before the latest instant, the log is empty. The log's latest instant does not move.
func TestCapEndsEveryBucketByTheInstant(t *testing.T) {
	for _, wide := range []bool{false, true} {
		l := NewLog(time.Minute, time.Second)
		l.Add(sec(0), 3)
		l.Add(sec(10.5), 4)
		l.Add(sec(50), 5)
		if wide {
			l.widen()
		}
		l.Cap(sec(70))
		for _, c := range []struct {
			at   float64
			used int
		}{{50, 12}, {59.999, 12}, {60, 9}, {69.999, 9}, {70, 0}} {
			if got := l.Used(sec(c.at)); got != c.used {
				t.Errorf("wide %v: capped at 70 s: used at %v s = %d, want %d", wide, c.at, got, c.used)
			}
		}
		l.Add(sec(71), 2)
		l.Cap(sec(71))
		if got, latest := l.Used(sec(71)), l.Latest(); got != 0 || !latest.Equal(sec(71)) {
			t.Errorf("wide %v: capped at its latest instant: used %d, latest %v; want 0 at 71 s", wide, got, latest)
		}
		l.Add(sec(72), 1)
		if got := l.Used(sec(131.999)); got != 1 {
			t.Errorf("wide %v: after the cap, a record at 72 s: used at 131.999 s = %d, want 1", wide, got)
		}
	}
}

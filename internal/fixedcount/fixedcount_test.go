package fixedcount

import (
	"testing"
	"time"
)

func sec(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

// TestLateRecordsCountInCurrentWindow: a record from a window that has ended counts in the current
// window (never dropped: docs/rules.md#window-semantics); a query dated before the latest instant seen is answered at
// that instant.
func TestLateRecordsCountInCurrentWindow(t *testing.T) {
	c := NewCounter(time.Minute)
	c.Add(sec(1030), 2)
	c.Add(sec(1010), 5) // window [960, 1020) ended at the counter's time: counted at 1030
	if got := c.Used(sec(1030)); got != 7 {
		t.Errorf("used = %d, want 7", got)
	}
	c.Add(sec(1025), 1) // late but in the current window
	if got := c.Used(sec(1000)); got != 8 {
		t.Errorf("used asked in the past = %d, want 8 (answered at 1030)", got)
	}
	if got := c.WaitTime(sec(1000), 53, 60); got != 50*time.Second {
		t.Errorf("wait asked in the past = %v, want 50s", got)
	}
	if e := c.Expiry(); !e.Equal(sec(1080)) {
		t.Errorf("expiry = %v, want 1080 s", e.Unix())
	}
	c.Remove(sec(1010), 1) // an old window: nothing to take back
	c.Remove(sec(1079), 2)
	if got := c.Used(sec(1030)); got != 6 {
		t.Errorf("used after release = %d, want 6", got)
	}
	c.Remove(sec(1020), 7)
	if got, e := c.Used(sec(1030)), c.Expiry(); got != 0 || !e.IsZero() {
		t.Errorf("after releasing more than counted: used %d expiry %v; want 0, zero", got, e)
	}
}

// TestWindowStartAlignedToUTC: WindowStart is the start of the aligned window holding the
// instant, in UTC, before 1970 too.
func TestWindowStartAlignedToUTC(t *testing.T) {
	at := time.Date(2026, 11, 30, 17, 42, 13, 5, time.FixedZone("X", 5*3600))
	cases := []struct {
		w    time.Duration
		want time.Time
	}{
		{time.Minute, time.Date(2026, 11, 30, 12, 42, 0, 0, time.UTC)},
		{time.Hour, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
		{24 * time.Hour, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		{10 * time.Second, time.Date(2026, 11, 30, 12, 42, 10, 0, time.UTC)},
	}
	for _, c := range cases {
		if got := WindowStart(at, c.w); !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("WindowStart(%v) = %v, want %v", c.w, got, c.want)
		}
	}
	if got := WindowStart(sec(-0.5), time.Second); !got.Equal(sec(-1)) {
		t.Errorf("before 1970: %v, want -1 s", got)
	}
}

// TestStateRoundTripsExactly: State and SetState restore a counter that answers as the first.
func TestStateRoundTripsExactly(t *testing.T) {
	c := NewCounter(time.Minute)
	c.Add(sec(1030), 7)
	start, n := c.State()
	d := NewCounter(time.Minute)
	d.SetState(start, n, c.Latest())
	if !d.Latest().Equal(sec(1030)) || d.Used(sec(1030)) != 7 || d.WaitTime(sec(1040), 54, 60) != 40*time.Second {
		t.Errorf("restored counter differs: latest %v used %d", d.Latest().Unix(), d.Used(sec(1030)))
	}
	if !start.Equal(sec(1020)) {
		t.Errorf("start = %v, want 1020 s", start)
	}
}

package rollinglog

import (
	"testing"
	"time"
)

func ms(v int64) time.Time { return time.UnixMilli(v) }

// TestShiftMovesBucketsNeverEarly: a clock step of −3600.5 s moves every bucket by exactly that;
// two buckets that land in one granule merge, holding the earlier one's requests 0.2 s longer
// (never early).
func TestShiftMovesBucketsNeverEarly(t *testing.T) {
	l := NewLog(time.Minute, time.Second)
	l.Add(ms(5_000_900), 10)
	l.Add(ms(5_001_100), 20)
	l.Add(ms(5_059_500), 5)
	l.Shift(-3600500 * time.Millisecond)
	if got := l.Latest(); !got.Equal(ms(1_459_000)) {
		t.Fatalf("latest = %v, want 1459 s", got.UnixMilli())
	}
	if got := l.Buckets(); got != 2 {
		t.Errorf("buckets = %d, want 2 (1400.4 and 1400.6 share a granule)", got)
	}
	if got := l.Used(ms(1_459_000)); got != 35 {
		t.Errorf("used = %d, want 35", got)
	}
	// Unshifted, one slot would free at 5060.9, i.e. 1.4 s after 5059.5; merged it frees at
	// 1400.6 + 60 = 1460.6, 1.6 s after the new latest instant.
	if got := l.WaitTime(ms(1_459_000), 1, 35); got != 1600*time.Millisecond {
		t.Errorf("wait = %v, want 1.6s", got)
	}
	if got := l.Used(ms(1_460_599)); got != 35 {
		t.Errorf("used at 1460.599 = %d, want 35", got)
	}
	if got := l.Used(ms(1_460_600)); got != 5 {
		t.Errorf("used at 1460.6 = %d, want 5", got)
	}
	if got := l.Expiry(); !got.Equal(ms(1_519_000)) {
		t.Errorf("expiry = %v, want 1519 s", got.UnixMilli())
	}
	// A record after the shift joins the bucket of its granule.
	l.Add(ms(1_460_900), 1)
	if got := l.Buckets(); got != 2 {
		t.Errorf("buckets after a record in the newest granule = %d, want 2", got)
	}

	// A whole number of granules keeps every bucket apart, and an empty log ignores a shift.
	l = NewLog(10*time.Second, time.Second)
	l.Add(ms(100_200), 1)
	l.Add(ms(101_200), 1)
	l.Shift(-50 * time.Second)
	if l.Buckets() != 2 || l.Used(ms(50_200)) != 2 || l.Used(ms(60_200)) != 1 || l.Used(ms(61_200)) != 0 {
		t.Errorf("whole-granule shift: buckets %d; want 2 buckets freed at 60.2 and 61.2 s", l.Buckets())
	}
	e := NewLog(time.Minute, time.Second)
	e.Shift(-time.Hour)
	if !e.Latest().IsZero() || e.Buckets() != 0 {
		t.Errorf("empty log after a shift: latest %v, %d buckets; want zero, 0", e.Latest(), e.Buckets())
	}
}

// TestAddNeverDrops: a record dated so early that it no longer counts at the log's latest
// instant counts there (the issue-13 clock step: dropped before).
func TestAddNeverDrops(t *testing.T) {
	l := NewLog(time.Minute, time.Second)
	l.Add(ms(3_600_000), 1)
	for range 130 {
		l.Add(ms(0), 1) // an hour earlier
	}
	if got := l.Used(ms(3_600_000)); got != 131 {
		t.Errorf("used = %d, want 131", got)
	}
	if got := l.Expiry(); !got.Equal(ms(3_660_000)) {
		t.Errorf("expiry = %v, want 3660 s", got.UnixMilli())
	}
}

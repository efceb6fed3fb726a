package rollinglog

import (
	"testing"
	"time"
)

func sec(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

// TestStateBoundedAtAnyRate: state stays within W/g + 1 buckets at any rate, and in-order writes at
// a steady rate reuse the ring without growing it.
func TestStateBoundedAtAnyRate(t *testing.T) {
	l := NewLog(10*time.Second, time.Second)
	for i := 0; i < 100_000; i++ {
		l.Add(time.Unix(0, int64(i)*int64(7*time.Millisecond)), 1)
		if l.Buckets() > 11 {
			t.Fatalf("after %d adds: %d buckets, want ≤ 11", i, l.Buckets())
		}
	}
	if l.Cost() > 80+bucketBytes*11 {
		t.Errorf("cost %d: ring grew past W/g+1 buckets", l.Cost())
	}
	// Writes dated far ahead of each other still cannot grow the log past the bound, and fold
	// counts instead of dropping them.
	l = NewLog(3*time.Second, time.Second)
	for i := 0; i < 10; i++ {
		l.Add(sec(float64(100+i)), 1)
	}
	l.Add(sec(50), 1) // late write, already expired: dropped
	if l.Buckets() > 4 {
		t.Errorf("%d buckets, want ≤ 4", l.Buckets())
	}
}

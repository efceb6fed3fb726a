package rollingwindow

import (
	"testing"
	"time"
)

// TestEncodingRoundTrip: a decoded log answers exactly as the one encoded, at the edges too.
func TestEncodingRoundTrip(t *testing.T) {
	l := NewLog(10*time.Second, time.Second)
	l.Add(sec(100.2), 2)
	l.Add(sec(103.7), 1)
	l.Add(sec(105), 4)
	data, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	m := NewLog(10*time.Second, time.Second)
	if err := m.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if !m.Latest().Equal(sec(105)) || m.Buckets() != 3 || !m.Expiry().Equal(sec(115)) {
		t.Fatalf("decoded: latest %v, %d buckets, expiry %v", m.Latest(), m.Buckets(), m.Expiry())
	}
	for _, q := range []struct {
		at   float64
		used int
		wait time.Duration
	}{{105, 7, 8700 * time.Millisecond}, {110.2, 5, 3500 * time.Millisecond}, {113.7, 4, 0}, {115, 0, 0}} {
		if u, w := m.Used(sec(q.at)), m.WaitTime(sec(q.at), 4, 8); u != q.used || w != q.wait {
			t.Errorf("at %v: used %d, wait(4) %v; want %d, %v", q.at, u, w, q.used, q.wait)
		}
	}
	empty, _ := NewLog(time.Minute, time.Second).MarshalBinary()
	e := NewLog(time.Minute, time.Second)
	if err := e.UnmarshalBinary(empty); err != nil || !e.Latest().IsZero() || e.Buckets() != 0 {
		t.Errorf("empty log: %v", err)
	}
}

// TestDecodingRefusesBadData: every malformed input is an error, and the log keeps its state.
func TestDecodingRefusesBadData(t *testing.T) {
	small := NewLog(2*time.Second, time.Second) // holds at most 3 buckets
	small.Add(sec(1), 1)
	good, _ := small.MarshalBinary()
	four := NewLog(4*time.Second, time.Second)
	for i := range 4 {
		four.Add(sec(float64(10+i)), 1)
	}
	tooMany, _ := four.MarshalBinary()
	for name, data := range map[string][]byte{
		"empty":            nil,
		"other format":     {2, 0, 0},
		"bad seen flag":    {1, 7, 0},
		"truncated":        good[:len(good)-1],
		"trailing bytes":   append(append([]byte{}, good...), 0),
		"too many buckets": tooMany,
		"out of order":     {1, 1, 2, 1, 20, 20, 2, 10, 2, 2, 10, 2}, // indexes 10 then 5
		"negative count":   {1, 1, 2, 1, 20, 20, 1},                  // count −1
	} {
		l := NewLog(2*time.Second, time.Second)
		l.Add(sec(50), 3)
		if err := l.UnmarshalBinary(data); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
		if l.Used(sec(50)) != 3 || !l.Latest().Equal(sec(50)) {
			t.Errorf("%s: the log's state changed", name)
		}
	}
}

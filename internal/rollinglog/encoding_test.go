package rollinglog

import (
	"encoding/binary"
	"math"
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

// TestDecodingRefusesTotalOverflow: a stored state whose counts sum past MaxInt64 is refused;
// decoded, its total would wrap negative and admit everything.
func TestDecodingRefusesTotalOverflow(t *testing.T) {
	w, g := time.Minute, time.Second
	now := time.Unix(1_800_000_000, 0)
	idx := now.UnixNano() / int64(g)
	b := []byte{1, 1}
	b = binary.AppendVarint(b, now.UnixNano())
	b = binary.AppendUvarint(b, 2)
	for i := int64(0); i < 2; i++ {
		b = binary.AppendVarint(b, idx-1+i)
		b = binary.AppendVarint(b, now.UnixNano()-int64(g)*(1-i))
		b = binary.AppendVarint(b, math.MaxInt64/2+1)
	}
	l := NewLog(w, g)
	if err := l.UnmarshalBinary(b); err == nil {
		t.Errorf("decoded counts that overflow: used %d", l.Used(now))
	}
}

// TestDecodingChecksGranule: decoding refuses a bucket whose granule is not that of its latest
// instant, and buckets in a log that has seen no instant (neither is written by MarshalBinary;
// the Log derives a bucket's granule from its latest instant), and keeps its state.
func TestDecodingChecksGranule(t *testing.T) {
	s := int64(time.Second)
	bucket := func(b []byte, idx, latest, count int64) []byte {
		return binary.AppendVarint(binary.AppendVarint(binary.AppendVarint(b, idx), latest), count)
	}
	withHW := binary.AppendVarint([]byte{logFormat, 1}, 50*s)
	for name, data := range map[string][]byte{
		"granule of another instant": bucket(binary.AppendUvarint(withHW, 1), 49, 48*s, 1),
		"granule one off":            bucket(bucket(binary.AppendUvarint(withHW, 2), 48, 48*s, 1), 48, 49*s, 1),
		"unseen with buckets":        bucket([]byte{logFormat, 0, 1}, 48, 48*s, 1),
		"count past the data":        {logFormat, 0, 3, 0, 0},
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
	// The same buckets with their own granules decode.
	good := bucket(bucket(binary.AppendUvarint(withHW, 2), 48, 48*s, 1), 49, 49*s, 1)
	p := newPair(t, 2*time.Second, time.Second)
	if err := p.l.UnmarshalBinary(good); err != nil {
		t.Fatalf("good data: %v", err)
	}
	if err := p.ref.UnmarshalBinary(good); err != nil {
		t.Fatalf("good data, reference: %v", err)
	}
	p.used(50 * s) // 2: a decoded log drops what expired when its time next moves on
	if p.used(50*s+1) != 1 {
		t.Errorf("used just after 50 s = %d, want 1", p.l.Used(sec(50)))
	}
}

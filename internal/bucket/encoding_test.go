package bucket

import (
	"testing"
	"time"
)

// TestEncodingRoundTripsAndRefusesBadData: a decoded bucket answers as the one encoded, a fresh
// one decodes fresh, and malformed data is an error that leaves the bucket as it was.
func TestEncodingRoundTripsAndRefusesBadData(t *testing.T) {
	b := NewBucket(10, 10*time.Second)
	b.Add(sec(100.5), 7)
	data, _ := b.MarshalBinary()
	c := NewBucket(10, 10*time.Second)
	if err := c.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if !c.Latest().Equal(sec(100.5)) || c.Used(sec(101)) != 7 || c.WaitTime(sec(101), 4, 10) != 500*time.Millisecond {
		t.Errorf("decoded bucket differs: latest %v, used %d", c.Latest(), c.Used(sec(101)))
	}
	fresh, _ := NewBucket(3, time.Second).MarshalBinary()
	d := NewBucket(3, time.Second)
	if err := d.UnmarshalBinary(fresh); err != nil || !d.Latest().IsZero() || d.Used(sec(0)) != 0 {
		t.Errorf("fresh bucket: %v", err)
	}
	for name, bad := range map[string][]byte{
		"empty": nil, "other format": {2, 0, 0}, "bad flag": {1, 5, 0},
		"truncated": data[:len(data)-1], "trailing": append(append([]byte{}, data...), 0),
		"negative debt": {1, 0, 1}, // zig-zag 1 is −1
	} {
		e := NewBucket(10, 10*time.Second)
		e.Add(sec(5), 2)
		if err := e.UnmarshalBinary(bad); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
		if e.Used(sec(5)) != 2 {
			t.Errorf("%s: state changed", name)
		}
	}
}

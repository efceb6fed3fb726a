package rollingwindow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// logFormat is the first byte of an encoded Log, so that a later layout can be told apart.
const logFormat = 1

// MarshalBinary encodes the log's buckets and latest instant, for stores that keep state as
// bytes (the SQLite store). The window and granularity are not encoded: they come from the
// rule the log is remade for. It implements encoding.BinaryMarshaler and never fails.
func (l *Log) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 2+binary.MaxVarintLen64*(1+3*l.size))
	b = append(b, logFormat)
	if l.seen {
		b = append(b, 1)
		b = binary.AppendVarint(b, l.hw)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(l.size))
	for i := 0; i < l.size; i++ {
		x := l.at(i)
		b = binary.AppendVarint(b, x.index)
		b = binary.AppendVarint(b, x.latest)
		b = binary.AppendVarint(b, x.count)
	}
	return b, nil
}

// UnmarshalBinary replaces the log's state with what MarshalBinary encoded. Data that is
// truncated, of another format, or that does not fit this log's window (more buckets than it
// holds, buckets out of order, negative counts) returns an error and leaves the log unchanged.
func (l *Log) UnmarshalBinary(data []byte) error {
	bad := func(why string) error { return fmt.Errorf("rollingwindow: cannot decode log state: %s", why) }
	if len(data) < 3 || data[0] != logFormat || data[1] > 1 {
		return bad("unknown format")
	}
	seen, p := data[1] == 1, data[2:]
	var hw int64
	if seen {
		v, k := binary.Varint(p)
		if k <= 0 {
			return bad("truncated")
		}
		hw, p = v, p[k:]
	}
	n, k := binary.Uvarint(p)
	if k <= 0 {
		return bad("truncated")
	}
	p = p[k:]
	if n > uint64(l.max) {
		return bad(fmt.Sprintf("%d buckets, this window holds at most %d", n, l.max))
	}
	ring := make([]bucket, n)
	var total int64
	for i := range ring {
		var v [3]int64
		for j := range v {
			x, k := binary.Varint(p)
			if k <= 0 {
				return bad("truncated")
			}
			v[j], p = x, p[k:]
		}
		ring[i] = bucket{index: v[0], latest: v[1], count: v[2]}
		if v[2] < 0 || i > 0 && v[0] <= ring[i-1].index {
			return bad("buckets out of order or negative")
		}
		if v[2] > math.MaxInt64-total {
			return bad("counts overflow")
		}
		total += v[2]
	}
	if len(p) != 0 {
		return errors.New("rollingwindow: cannot decode log state: trailing bytes")
	}
	l.ring, l.head, l.size, l.total, l.hw, l.seen = ring, 0, len(ring), total, hw, seen
	return nil
}

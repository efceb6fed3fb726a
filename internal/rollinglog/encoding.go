package rollinglog

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
//
// The layout is the same whatever form the log holds its buckets in: format byte 1, a byte
// saying whether the log has seen an instant, that instant (varint, ns), the bucket count
// (uvarint), then for each bucket oldest first its granule ⌊latest/g⌋, its latest instant (ns)
// and its count (varints).
func (l *Log) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 2+binary.MaxVarintLen64*(1+3*int(l.size)))
	b = append(b, logFormat)
	if len(l.ring) != 0 {
		b = append(b, 1)
		b = binary.AppendVarint(b, l.hw)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(l.size))
	for i := range int(l.size) {
		latest, count := l.get(l.slot(i))
		b = binary.AppendVarint(b, floorDiv(latest, l.gran))
		b = binary.AppendVarint(b, latest)
		b = binary.AppendVarint(b, count)
	}
	return b, nil
}

// UnmarshalBinary replaces the log's state with what MarshalBinary encoded. Data that is
// truncated, of another format, or that does not fit this log's window (more buckets than it
// holds, buckets out of order, negative counts, a bucket whose granule is not that of its
// latest instant, buckets in a log that has seen no instant: none of which MarshalBinary
// writes) returns an error and leaves the log unchanged.
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
	if most := uint64(l.window/l.gran + 1); n > most {
		return bad(fmt.Sprintf("%d buckets, this window holds at most %d", n, most))
	}
	if n > 0 && !seen {
		return bad("buckets in a log that has seen no instant")
	}
	// Each bucket takes at least 3 bytes: a count beyond the data is truncated, and is not
	// allocated for.
	if n > uint64(len(p))/3 {
		return bad("truncated")
	}
	buckets := make([][2]int64, n) // latest, count
	var total, prev int64
	for i := range buckets {
		var v [3]int64
		for j := range v {
			x, k := binary.Varint(p)
			if k <= 0 {
				return bad("truncated")
			}
			v[j], p = x, p[k:]
		}
		if v[2] < 0 || i > 0 && v[0] <= prev {
			return bad("buckets out of order or negative")
		}
		if v[0] != floorDiv(v[1], l.gran) {
			return bad("a bucket's granule is not that of its latest instant")
		}
		if v[2] > math.MaxInt64-total {
			return bad("counts overflow")
		}
		prev, total = v[0], total+v[2]
		buckets[i] = [2]int64{v[1], v[2]}
	}
	if len(p) != 0 {
		return errors.New("rollingwindow: cannot decode log state: trailing bytes")
	}
	d := Log{window: l.window, gran: l.gran, total: total, hw: hw}
	if d.window > compactMaxWindow {
		d.base = wideBase
	}
	if seen {
		d.ring = d.alloc(max(minBuckets, int(n)))
		if d.base != wideBase {
			d.rebase() // no bucket yet: base = hw − W + 1
		}
		// put widens the log if a bucket does not fit a compact word (a count above 65 535,
		// an instant outside [base, base + 2^48)), so every decoded value is kept as it is.
		for i, b := range buckets {
			d.size = uint32(i) // the buckets put so far, for a widening to carry over
			d.put(uint32(i), b[0], b[1])
		}
		d.size = uint32(n)
		if n > 0 {
			d.start = prev * l.gran
		}
	}
	*l = d
	return nil
}

package bucket

import (
	"encoding/binary"
	"errors"
	"time"
)

const bucketFormat = 1

// MarshalBinary encodes the bucket's state (State), for stores that keep state as bytes. It
// implements encoding.BinaryMarshaler and never fails.
func (b *Bucket) MarshalBinary() ([]byte, error) {
	debt, last := b.State()
	out := []byte{bucketFormat, 0}
	if !last.IsZero() {
		out[1] = 1
		out = binary.AppendVarint(out, last.UnixNano())
	}
	return binary.AppendVarint(out, debt), nil
}

// UnmarshalBinary replaces the bucket's state with what MarshalBinary encoded; malformed data
// returns an error and leaves the bucket unchanged.
func (b *Bucket) UnmarshalBinary(data []byte) error {
	bad := errors.New("tokenbucket: cannot decode bucket state: malformed")
	if len(data) < 3 || data[0] != bucketFormat || data[1] > 1 {
		return bad
	}
	p := data[2:]
	var last time.Time
	if data[1] == 1 {
		v, k := binary.Varint(p)
		if k <= 0 {
			return bad
		}
		last, p = time.Unix(0, v), p[k:]
	}
	debt, k := binary.Varint(p)
	if k <= 0 || k != len(p) || debt < 0 {
		return bad
	}
	b.SetState(debt, last)
	return nil
}

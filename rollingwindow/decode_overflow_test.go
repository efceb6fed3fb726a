package rollingwindow

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
)

// TestDecodeTotalOverflow: a stored state whose counts sum past MaxInt64 is refused; decoded, its
// total would wrap negative and admit everything.
func TestDecodeTotalOverflow(t *testing.T) {
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

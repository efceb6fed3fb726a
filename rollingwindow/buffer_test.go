package rollingwindow

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// TestInitBufferMatchesNewLog: a log made with InitBuffer answers every query exactly as one
// made with NewLog, through random records (in and out of order), removals, queries and shifts,
// for windows of a few buckets to a day, and a wide one; it uses the buffer from its first
// instant until it needs more buckets (a compact log with a buffer of at least 4), never after
// it has left it, and never a wide log's or a short buffer; while it uses the buffer its Cost
// is NewLog's log with a ring of the buffer's size.
func TestInitBufferMatchesNewLog(t *testing.T) {
	for _, c := range []struct {
		w, g   time.Duration
		buf    int
		usable bool
	}{
		{time.Minute, time.Second, 4, true},
		{2 * time.Second, time.Second, 4, true}, // W/g + 1 = 3 buckets: the buffer is more than the log holds
		{24 * time.Hour, 24 * time.Minute, 4, true},
		{10 * time.Second, time.Second, 6, true},
		{time.Minute, time.Second, 3, false},     // too short: ignored
		{48 * time.Hour, time.Minute, 4, false},  // wide: ignored
		{time.Second, time.Millisecond, 4, true}, // many buckets: it leaves the buffer soon
		{time.Minute, 30 * time.Second, 4, true}, // 3 buckets
		{5 * time.Minute, time.Second / 1000 * 10, 4, true},
	} {
		stayed, leftN := 0, 0
		for seed := range 20 {
			rng := rand.New(rand.NewPCG(uint64(c.w), uint64(seed)))
			buf := make([]uint64, c.buf)
			a, b := NewLog(c.w, c.g), new(Log)
			b.InitBuffer(c.w, c.g, buf)
			if b.InBuffer(buf) != c.usable {
				t.Fatalf("%v/%v buffer %d: InBuffer %v before any instant, want %v", c.w, c.g, c.buf, b.InBuffer(buf), c.usable)
			}
			if c.usable && b.Cost() != a.Cost()+8*c.buf || !c.usable && b.Cost() != a.Cost() {
				t.Fatalf("%v/%v buffer %d: Cost %d before any instant (NewLog's %d)", c.w, c.g, c.buf, b.Cost(), a.Cost())
			}
			now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			var ats []time.Time
			left := false
			for step := range 300 {
				now = now.Add(time.Duration(rng.Int64N(int64(c.w) / 4)))
				at := now.Add(-time.Duration(rng.Int64N(int64(c.w) / 2)))
				switch r := rng.IntN(10); {
				case r < 5:
					n := 1 + rng.IntN(3)
					a.Add(at, n)
					b.Add(at, n)
					ats = append(ats, at)
				case r < 6 && len(ats) > 0:
					x := ats[rng.IntN(len(ats))]
					a.Remove(x, 1)
					b.Remove(x, 1)
				case r < 7:
					d := time.Duration(rng.Int64N(int64(c.g)*3)) - time.Duration(c.g)
					a.Shift(d)
					b.Shift(d)
					now = now.Add(d)
				default:
					n := 1 + rng.IntN(3)
					if wa, wb := a.WaitTime(now, n, 10), b.WaitTime(now, n, 10); wa != wb {
						t.Fatalf("step %d: WaitTime %v, NewLog's %v", step, wb, wa)
					}
				}
				ea, _ := a.MarshalBinary()
				eb, _ := b.MarshalBinary()
				if !bytes.Equal(ea, eb) || a.Used(now) != b.Used(now) || !a.Latest().Equal(b.Latest()) || !a.Expiry().Equal(b.Expiry()) {
					t.Fatalf("%v/%v buffer %d seed %d step %d: state %x, NewLog's %x", c.w, c.g, c.buf, seed, step, eb, ea)
				}
				in := b.InBuffer(buf)
				switch {
				case in && (left || !c.usable):
					t.Fatalf("step %d: the log uses the buffer again (left %v, usable %v)", step, left, c.usable)
				case in && b.Cost() != logBytes+8*c.buf:
					t.Fatalf("step %d: Cost %d in the buffer, want %d", step, b.Cost(), logBytes+8*c.buf)
				case !in:
					left = true
				}
			}
			if left {
				leftN++
			} else {
				stayed++
			}
		}
		t.Logf("%v/%v buffer %d: %d logs kept the buffer, %d left it", c.w, c.g, c.buf, stayed, leftN)
		if c.usable && c.w/c.g+1 <= time.Duration(c.buf) && leftN != 0 {
			t.Errorf("%v/%v: a log that never holds more than %d buckets left its buffer", c.w, c.g, c.w/c.g+1)
		}
	}
}

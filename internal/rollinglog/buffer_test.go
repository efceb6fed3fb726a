package rollinglog

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
// is the Log's 80 bytes and the buffer's.
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
		{5 * time.Minute, 10 * time.Millisecond, 4, true},
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

// TestInitBufferOverGarbageMatchesNewLog: a log made with InitBuffer over a
// buffer full of garbage (a reused one) answers every query as NewLog's, through AddNanos with
// counts that widen it, Remove, Shift before and after the first instant, UnmarshalBinary into
// the buffered log and of its state into a new one, Init on it, and InitBuffer again on the same
// buffer, for windows of 1 ns to 48 h; in the buffer, its Cost is the Log and the buffer.
func TestInitBufferOverGarbageMatchesNewLog(t *testing.T) {
	for _, c := range []struct {
		w, g time.Duration
		buf  int
	}{
		{2 * time.Second, time.Second, 4},
		{2 * time.Second, time.Second, 6},
		{4 * time.Second, time.Second, 4},
		{time.Minute, time.Second, 4},
		{time.Minute, time.Second, 8},
		{10 * time.Second, 100 * time.Millisecond, 4},
		{24 * time.Hour, 24 * time.Minute, 4},
		{39 * time.Hour, time.Hour, 4},
		{48 * time.Hour, time.Hour, 4},
		{time.Nanosecond, time.Nanosecond, 4},
		{3 * time.Nanosecond, time.Nanosecond, 4},
	} {
		for seed := range 50 {
			rng := rand.New(rand.NewPCG(uint64(c.w), uint64(seed)))
			buf := make([]uint64, c.buf)
			for i := range buf {
				buf[i] = rng.Uint64() // garbage: a reused buffer
			}
			a, b := NewLog(c.w, c.g), new(Log)
			b.InitBuffer(c.w, c.g, buf)
			now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			var ats []int64
			for step := range 400 {
				span := max(int64(c.w)/3, 1)
				now += rng.Int64N(span)
				at := now - rng.Int64N(span)
				where := func() string { return c.w.String() + "/" + c.g.String() }
				switch x := rng.IntN(30); {
				case x < 12:
					n := 1 + rng.IntN(3)
					if rng.IntN(40) == 0 {
						n = 70000
					}
					a.AddNanos(at, n)
					b.AddNanos(at, n)
					ats = append(ats, at)
				case x < 15 && len(ats) > 0:
					r := time.Unix(0, ats[rng.IntN(len(ats))])
					k := 1 + rng.IntN(2)
					a.Remove(r, k)
					b.Remove(r, k)
				case x < 17:
					d := time.Duration(rng.Int64N(int64(c.g)*3+1)) - 2*c.g
					a.Shift(d)
					b.Shift(d)
					now += int64(d)
				case x == 17:
					enc, _ := a.MarshalBinary()
					if err := b.UnmarshalBinary(enc); err != nil {
						t.Fatalf("%s seed %d step %d: %v", where(), seed, step, err)
					}
				case x == 18:
					// Decode the buffered log's state into a fresh NewLog: same as a's.
					enc, _ := b.MarshalBinary()
					d := NewLog(c.w, c.g)
					if err := d.UnmarshalBinary(enc); err != nil {
						t.Fatalf("%s seed %d step %d: decode of the buffered log: %v", where(), seed, step, err)
					}
					ea, _ := a.MarshalBinary()
					ed, _ := d.MarshalBinary()
					if !bytes.Equal(ea, ed) {
						t.Fatalf("%s seed %d step %d: decoded %x, want %x", where(), seed, step, ed, ea)
					}
				case x == 19 && rng.IntN(8) == 0:
					a.Init(c.w, c.g)
					if rng.IntN(2) == 0 {
						b.Init(c.w, c.g)
					} else {
						b.InitBuffer(c.w, c.g, buf) // back to the buffer, as a reused entry would
					}
					ats = ats[:0]
				case x < 24:
					n := 1 + rng.IntN(5)
					lim := 1 + rng.IntN(20)
					if wa, wb := a.WaitNanos(now, n, lim), b.WaitNanos(now, n, lim); wa != wb {
						t.Fatalf("%s seed %d step %d: WaitNanos %d, NewLog's %d", where(), seed, step, wb, wa)
					}
				default:
					if ua, ub := a.UsedNanos(now), b.UsedNanos(now); ua != ub {
						t.Fatalf("%s seed %d step %d: UsedNanos %d, NewLog's %d", where(), seed, step, ub, ua)
					}
				}
				ea, _ := a.MarshalBinary()
				eb, _ := b.MarshalBinary()
				la, sa := a.LatestNanos()
				lb, sb := b.LatestNanos()
				if !bytes.Equal(ea, eb) || la != lb || sa != sb || !a.Latest().Equal(b.Latest()) ||
					!a.Expiry().Equal(b.Expiry()) || a.Buckets() != b.Buckets() || a.total != b.total || a.start != b.start && a.size != 0 {
					t.Fatalf("%s buf %d seed %d step %d: state %x (latest %d %v), NewLog's %x (latest %d %v)", where(), c.buf, seed, step, eb, lb, sb, ea, la, sa)
				}
				if b.InBuffer(buf) && b.Cost() != logBytes+8*c.buf {
					t.Fatalf("%s seed %d step %d: Cost %d in the buffer", where(), seed, step, b.Cost())
				}
			}
		}
	}
}

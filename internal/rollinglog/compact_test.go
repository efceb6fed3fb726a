package rollinglog

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"
)

// pair drives the Log and the reference log (the int64-bucket log it replaced) with the same
// operations and fails at the first answer or state that differs.
type pair struct {
	t   fataler
	l   *Log
	ref *refLog
	// every, when above 1, compares the states after every every-th operation only (answers
	// are compared after each), for long runs under the race detector.
	every, ops int
}

// fataler is what testing.T and rapid.T have in common that pair needs.
type fataler interface {
	Fatalf(format string, args ...any)
}

func newPair(t fataler, w, g time.Duration) *pair {
	return &pair{t: t, l: NewLog(w, g), ref: newRefLog(w, g)}
}

func (p *pair) add(at int64, n int) {
	p.l.Add(time.Unix(0, at), n)
	p.ref.Add(time.Unix(0, at), n)
	p.same("add")
}

func (p *pair) remove(at int64, n int) {
	p.l.Remove(time.Unix(0, at), n)
	p.ref.Remove(time.Unix(0, at), n)
	p.same("remove")
}

func (p *pair) used(at int64) int {
	u, want := p.l.Used(time.Unix(0, at)), p.ref.Used(time.Unix(0, at))
	if u != want {
		p.t.Fatalf("Used(%d) = %d, reference %d", at, u, want)
	}
	p.same("used")
	return u
}

func (p *pair) wait(at int64, n, limit int) {
	d, want := p.l.WaitTime(time.Unix(0, at), n, limit), p.ref.WaitTime(time.Unix(0, at), n, limit)
	if d != want {
		p.t.Fatalf("WaitTime(%d, %d, %d) = %v, reference %v", at, n, limit, d, want)
	}
	p.same("wait")
}

func (p *pair) shift(d time.Duration) {
	p.l.Shift(d)
	p.ref.Shift(d)
	p.same("shift")
}

// roundTrip replaces both logs by what their encodings decode to.
func (p *pair) roundTrip() {
	data, _ := p.l.MarshalBinary()
	l := NewLog(time.Duration(p.l.window), time.Duration(p.l.gran))
	if err := l.UnmarshalBinary(data); err != nil {
		p.t.Fatalf("decoding the log's own encoding: %v", err)
	}
	ref := newRefLog(time.Duration(p.ref.window), time.Duration(p.ref.gran))
	if err := ref.UnmarshalBinary(data); err != nil {
		p.t.Fatalf("the reference decoding the log's encoding: %v", err)
	}
	p.l, p.ref = l, ref
	p.same("decode")
}

// same checks that the two logs hold the same state: equal encodings (every bucket's granule,
// latest instant and count, and the latest instant seen), bucket counts, expiries and latest
// instants, and the ring's bound.
func (p *pair) same(after string) {
	if p.ops++; p.every > 1 && p.ops%p.every != 0 {
		return
	}
	got, _ := p.l.MarshalBinary()
	want, _ := p.ref.MarshalBinary()
	if !bytes.Equal(got, want) {
		p.t.Fatalf("after %s: encoding %x, reference %x", after, got, want)
	}
	if !p.l.Expiry().Equal(p.ref.Expiry()) || !p.l.Latest().Equal(p.ref.Latest()) || p.l.Buckets() != p.ref.Buckets() {
		p.t.Fatalf("after %s: expiry %v latest %v buckets %d; reference %v %v %d", after,
			p.l.Expiry(), p.l.Latest(), p.l.Buckets(), p.ref.Expiry(), p.ref.Latest(), p.ref.Buckets())
	}
	var sum int64
	for i := range int(p.l.size) {
		_, c := p.l.get(p.l.slot(i))
		sum += c
	}
	if sum != p.l.total {
		p.t.Fatalf("after %s: total %d, buckets sum to %d", after, p.l.total, sum)
	}
	if most := p.l.window/p.l.gran + 1; int64(p.l.capacity()) > max(minBuckets, most+most/4+1)*2 {
		p.t.Fatalf("after %s: ring of %d buckets for a window of %d", after, p.l.capacity(), most)
	}
}

func (l *Log) wide() bool { return l.base == wideBase }

// TestLogIsOneSizeClass: the Log is 80 bytes (a size class), as logBytes and Cost say.
func TestLogIsOneSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if got := unsafe.Sizeof(Log{}); got != logBytes {
		t.Errorf("unsafe.Sizeof(Log{}) = %d, logBytes = %d", got, logBytes)
	}
	if got := NewLog(time.Minute, time.Second).Cost(); got != logBytes {
		t.Errorf("an empty log costs %d, want %d (no ring yet)", got, logBytes)
	}
}

// TestWidensPastCompactCountExactly: a bucket holds up to 65 535 requests in a word; one more
// widens the log, keeping every value exact, and the log stays wide.
func TestWidensPastCompactCountExactly(t *testing.T) {
	p := newPair(t, time.Minute, time.Second)
	t0 := int64(1_800_000_000) * int64(time.Second)
	p.add(t0, 3)
	p.add(t0+int64(time.Second)+5, 65_535)
	if p.l.wide() {
		t.Fatal("wide with counts ≤ 65 535")
	}
	p.add(t0+int64(time.Second)+7, 1)
	if !p.l.wide() {
		t.Fatal("compact with a count of 65 536")
	}
	if u := p.used(t0 + int64(time.Second) + 9); u != 65_539 {
		t.Errorf("used %d, want 65 539", u)
	}
	p.wait(t0+int64(time.Second)+9, 5, 65_540)
	p.add(t0+2*int64(time.Second), 1<<40)
	p.remove(t0+int64(time.Second), 65_536)
	if u := p.used(t0 + 2*int64(time.Second)); u != 3+1<<40 {
		t.Errorf("used %d, want 3 + 2^40", u)
	}
	p.wait(t0+2*int64(time.Second), 1, 1<<40)
	// Back under 65 535 a bucket would fit a word again: the log stays wide, and right.
	p.used(t0 + 2*int64(time.Minute))
	p.add(t0+2*int64(time.Minute), 1)
	if !p.l.wide() || p.used(t0+2*int64(time.Minute)) != 1 {
		t.Errorf("after the big buckets expired: wide %v, used %d; want wide, 1", p.l.wide(), p.l.Used(time.Unix(0, t0+2*int64(time.Minute))))
	}
	p.roundTrip() // a decoded log of small counts is compact again
	if p.l.wide() {
		t.Error("decoded small counts into a wide log")
	}

	// A decoded count above 65 535 decodes wide.
	q := newPair(t, time.Minute, time.Second)
	q.add(t0, 70_000)
	q.roundTrip()
	if !q.l.wide() || q.used(t0) != 70_000 {
		t.Errorf("decoded: wide %v used %d; want wide, 70 000", q.l.wide(), q.l.Used(time.Unix(0, t0)))
	}
}

// TestLongWindowsWideFromStart: a window longer than 2^47 ns (39 h 5 min) keeps wide buckets from
// the start; a day with margin is compact. Both answer as the reference.
func TestLongWindowsWideFromStart(t *testing.T) {
	for _, c := range []struct {
		w, g time.Duration
		wide bool
	}{
		{24*time.Hour + time.Hour, time.Second, false},
		{compactMaxWindow, 1, false},
		{compactMaxWindow + 1, 1, true},
		{48 * time.Hour, time.Minute, true},
		{365 * 24 * time.Hour, time.Hour, true},
	} {
		p := newPair(t, c.w, c.g)
		if p.l.wide() != c.wide {
			t.Errorf("window %v: wide %v, want %v", c.w, p.l.wide(), c.wide)
		}
		t0 := int64(1_800_000_000) * int64(time.Second)
		step := int64(c.w) / 37
		for i := range int64(100) {
			p.add(t0+i*step, int(i%5)+1)
			p.add(t0+i*step-int64(c.w)/2, 1) // out of order, half a window back
			p.wait(t0+i*step, 3, 40)
		}
		p.roundTrip()
		p.used(t0 + 200*step)
		if p.l.wide() != c.wide {
			t.Errorf("window %v after use: wide %v, want %v", c.w, p.l.wide(), c.wide)
		}
	}
}

// TestBaseMovesOverTenDaysExactly: a minute log driven over 10 days of instants moves its base
// every 2^48 ns or so (about three times), and answers as the reference throughout.
func TestBaseMovesOverTenDaysExactly(t *testing.T) {
	p := newPair(t, time.Minute, time.Second)
	p.every = 97
	rng := rand.New(rand.NewPCG(17, 2))
	t0 := int64(1_800_000_000)*int64(time.Second) + 123_456_789
	now, end := t0, t0+int64(10*24*time.Hour)
	bases := map[int64]bool{}
	for now < end {
		switch r := rng.IntN(100); {
		case r < 60:
			p.add(now, 1+rng.IntN(3))
		case r < 70:
			p.add(now-rng.Int64N(int64(2*time.Minute)), 1) // late, sometimes already expired
		case r < 80:
			p.wait(now, 1+rng.IntN(5), 1+rng.IntN(100))
		default:
			p.used(now)
		}
		bases[p.l.base] = true
		if rng.IntN(1000) == 0 {
			now += rng.Int64N(int64(3 * time.Hour)) // a quiet spell
		} else {
			now += rng.Int64N(int64(2 * time.Second))
		}
	}
	p.every = 1
	p.same("10 days")
	if p.l.wide() {
		t.Fatal("the log widened")
	}
	if len(bases) < 4 {
		t.Errorf("%d bases over 10 days, want ≥ 4 (the first and 3 rebases)", len(bases))
	}
}

// TestQuietLogGivesRingBack: a log that was busy (a bucket every granule) and went quiet gives its
// ring back; one that keeps a steady number of buckets keeps its ring.
func TestQuietLogGivesRingBack(t *testing.T) {
	l := NewLog(24*time.Hour, time.Second)
	t0 := int64(1_800_000_000) * int64(time.Second)
	for i := range int64(5000) {
		l.Add(time.Unix(0, t0+i*int64(time.Second)), 1)
	}
	busy := l.Cost()
	if busy < 5000*8 {
		t.Fatalf("cost %d for 5000 buckets", busy)
	}
	// Quiet: one request an hour for a day; the burst expires.
	now := t0 + 5000*int64(time.Second)
	for range 25 {
		now += int64(time.Hour)
		l.Add(time.Unix(0, now), 1)
	}
	if l.Buckets() != 24 || l.Cost() > logBytes+64*8 {
		t.Errorf("after the quiet day: %d buckets, cost %d; want 24, ≤ %d", l.Buckets(), l.Cost(), logBytes+64*8)
	}
	// Steady: a minute log with a bucket every second keeps its 61 buckets' ring.
	m := NewLog(time.Minute, time.Second)
	for i := range int64(600) {
		m.Add(time.Unix(0, t0+i*int64(time.Second)), 1)
	}
	c := m.Cost()
	for i := range int64(600) {
		m.Add(time.Unix(0, t0+(600+i)*int64(time.Second)), 1)
		if m.Cost() != c {
			t.Fatalf("a steady log's ring changed: cost %d, then %d", c, m.Cost())
		}
	}
}

// TestRingBoundedByWindowInSizeClass: the ring holds at most W/g + 1 buckets, rounded up to the
// allocation's size class (Cost counts what is allocated), however the log is written.
func TestRingBoundedByWindowInSizeClass(t *testing.T) {
	l := NewLog(10*time.Second, time.Second)
	for i := 0; i < 100_000; i++ {
		l.Add(time.Unix(0, int64(i)*int64(7*time.Millisecond)), 1)
	}
	// 11 buckets: 88 bytes, in the 96-byte size class.
	if l.Cost() != logBytes+96 {
		t.Errorf("cost %d, want %d", l.Cost(), logBytes+96)
	}
	m := NewLog(time.Minute, time.Second)
	for i := range int64(300) {
		m.Add(time.Unix(0, i*int64(time.Second)), 1)
	}
	// 61 buckets: 488 bytes, in the 512-byte size class; 60 of them live.
	if m.Buckets() != 60 || m.Cost() != logBytes+512 {
		t.Errorf("buckets %d, cost %d; want 60, %d", m.Buckets(), m.Cost(), logBytes+512)
	}
}

// TestCostMatchesHeap: Cost is the heap a log holds, within 10 %, measured around making
// 10 000 logs in each state.
func TestCostMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	cases := append([]logShape{
		{"60per1m-1bucket", time.Minute, time.Second, 1},
		{"60per1m-10buckets", time.Minute, time.Second, 10},
		{"wide-48h-30buckets", 48 * time.Hour, time.Hour, 30},
	}, shapes...)
	for _, s := range cases {
		n := 10_000
		if s.buckets > 1000 {
			n = 200 // 10 MB of them
		}
		got := heapPerLog(n, func() *Log { return s.fill(benchEpoch) })
		cost := s.fill(benchEpoch).Cost()
		if d := got - float64(cost); d > 0.1*float64(cost) || d < -0.1*float64(cost) {
			t.Errorf("%s: %.0f bytes per log on the heap, Cost %d", s.name, got, cost)
		}
	}
	got := heapPerLog(10_000, func() *Log { return NewLog(time.Minute, time.Second) })
	if d := got - logBytes; d > 8 || d < -8 {
		t.Errorf("empty log: %.0f bytes on the heap, Cost %d", got, logBytes)
	}
}

// TestMatchesReferenceLog: the Log answers exactly as the int64-bucket log it replaced, over random
// records (in and out of order, expired, huge counts), removals, queries, clock shifts, quiet
// spells and encode/decode round trips, for short, odd, long (wide) windows.
func TestMatchesReferenceLog(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		g := rapid.SampledFrom([]time.Duration{time.Nanosecond, 7 * time.Millisecond, time.Second, time.Hour}).Draw(rt, "g")
		k := rapid.SampledFrom([]int64{1, 2, 3, 10, 60, 61, 1000}).Draw(rt, "k")
		w := time.Duration(k) * g
		if rapid.Bool().Draw(rt, "huge") { // past 2^47 ns: wide from the start, or just under
			w = (compactMaxWindow/g + time.Duration(rapid.Int64Range(-1, 1).Draw(rt, "near"))) * g
		}
		now := rapid.SampledFrom([]int64{0, -int64(time.Hour) - 3, 1_800_000_000_123_456_789}).Draw(rt, "epoch")
		p := newPair(rt, w, g)
		var recorded []int64
		for range rapid.IntRange(1, 200).Draw(rt, "ops") {
			switch rapid.IntRange(0, 8).Draw(rt, "op") {
			case 0: // time passes
				switch rapid.IntRange(0, 3).Draw(rt, "how") {
				case 0:
					now += rapid.Int64Range(0, int64(g)).Draw(rt, "d")
				case 1:
					now += rapid.Int64Range(0, 2*int64(w)).Draw(rt, "d")
				case 2:
					now += rapid.Int64Range(0, int64(10*24*time.Hour)).Draw(rt, "d")
				default:
					now += int64(1) << rapid.IntRange(40, 50).Draw(rt, "log2d")
				}
			case 1, 2: // record
				at := now - rapid.Int64Range(0, 2*int64(w)).Draw(rt, "back")
				if rapid.IntRange(0, 2).Draw(rt, "late") != 0 {
					at = now
				}
				n := rapid.IntRange(1, 5).Draw(rt, "n")
				if rapid.IntRange(0, 9).Draw(rt, "big") == 0 {
					n = rapid.SampledFrom([]int{65_534, 65_535, 65_536, 1 << 20, 1 << 40}).Draw(rt, "bign")
				}
				p.add(at, n)
				recorded = append(recorded, at)
			case 3: // give back
				at := now
				if len(recorded) > 0 {
					at = rapid.SampledFrom(recorded).Draw(rt, "at")
				}
				p.remove(at, rapid.SampledFrom([]int{1, 2, 70_000, 1 << 41}).Draw(rt, "k"))
			case 4:
				p.used(now)
			case 5:
				p.wait(now, rapid.IntRange(1, 100).Draw(rt, "n"), rapid.IntRange(1, 100).Draw(rt, "limit"))
			case 6: // the clock steps: by whole granules or not, either way
				d := time.Duration(rapid.Int64Range(-3*int64(w), 3*int64(w)).Draw(rt, "shift"))
				if rapid.Bool().Draw(rt, "whole") {
					d = d / g * g
				}
				p.shift(d)
				now += int64(d)
			case 7:
				p.roundTrip()
			case 8: // a query in the past: answered at the log's latest instant
				p.used(now - rapid.Int64Range(0, int64(w)).Draw(rt, "past"))
			}
		}
	})
}

// TestDecodedStaleBucketsMatchReference: a decoded state may hold buckets that no longer count at
// its latest instant (the wire format allows it; no log writes it). The Log keeps them as the
// previous log did, answers the same, and folds buckets the same way once the window's W/g + 1 are
// in use.
func TestDecodedStaleBucketsMatchReference(t *testing.T) {
	s := int64(time.Second)
	b := []byte{logFormat, 1}
	b = binary.AppendVarint(b, 100*s)
	b = binary.AppendUvarint(b, 3)
	for _, at := range []int64{10, 11, 12} {
		b = binary.AppendVarint(b, at)
		b = binary.AppendVarint(b, at*s+7)
		b = binary.AppendVarint(b, 2)
	}
	p := newPair(t, 3*time.Second, time.Second)
	if err := p.l.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if err := p.ref.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	p.same("decode")
	if !p.l.wide() {
		t.Error("stale buckets, 88 s before the base, decoded compact")
	}
	p.used(90 * s)
	p.wait(100*s, 1, 6)
	for _, at := range []int64{99, 98, 97, 99, 11} {
		p.add(at*s+3, 1)
	}
	p.used(100 * s)
	p.wait(100*s, 2, 6)
	p.used(102 * s)
	p.roundTrip()
}

// FuzzLog drives the Log and the previous log with operations decoded from the input (records
// in and out of order with small and huge counts, removals, queries, shifts, time jumps, round
// trips) and fails at the first answer or state that differs.
func FuzzLog(f *testing.F) {
	f.Add([]byte{1, 60, 0, 5, 1, 3, 2, 200, 4, 1, 3, 7, 5, 9, 6, 1})
	f.Add([]byte{2, 3, 1, 255, 1, 254, 0, 90, 1, 1, 7, 0, 3, 2, 5, 4})
	f.Add([]byte{0, 1, 1, 0, 1, 0, 1, 0, 2, 0, 6, 200, 1, 128, 7, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int64 {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int64(b)
		}
		grans := []time.Duration{time.Nanosecond, time.Millisecond, time.Second, time.Hour}
		g := grans[next()%4]
		w := time.Duration(1+next()) * g
		if w > compactMaxWindow/2 && next()%2 == 0 {
			w = compactMaxWindow / g * g
		}
		p := newPair(t, w, g)
		now := int64(1_800_000_000)*int64(time.Second) + next()*int64(time.Millisecond)
		var recorded []int64
		for len(data) > 0 {
			op, arg := next()%8, next()
			switch op {
			case 0:
				now += arg * arg * int64(g) / 16
			case 1, 2:
				at := now - (arg%4)*int64(w)/3 // now, or up to a window back (expired)
				n := 1 + int(arg%8)
				if op == 2 && arg%3 == 0 {
					n = 60_000 + int(arg)*100 // past a compact bucket's 65 535 with a few
				}
				p.add(at, n)
				recorded = append(recorded, at)
			case 3:
				if len(recorded) > 0 {
					p.remove(recorded[int(arg)%len(recorded)], 1+int(arg%70_000))
				}
			case 4:
				p.used(now)
			case 5:
				p.wait(now, 1+int(arg%20), 1+int(arg%50))
			case 6:
				d := time.Duration(arg-128) * w / 64
				p.shift(d)
				now += int64(d)
			case 7:
				if arg%4 == 0 {
					now += int64(1) << (40 + arg%10) // days to weeks: rebases
				}
				p.roundTrip()
			}
		}
	})
}

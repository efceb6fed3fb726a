// Package rollinglog is the rolling window's log (package rollingwindow makes the strategies
// and says what a log counts), for the stores that keep logs in forms of their own.
package rollinglog

import (
	"math"
	"slices"
	"time"
	"unsafe"
)

// A bucket is the requests recorded in one granule [k·g, (k+1)·g): how many, and the latest
// instant among them (Unix nanoseconds). The bucket counts until latest+W, so none of its
// requests is released before its own s+W (never early), and one that shares its granule
// with later ones is held at most g too long. Its granule k = ⌊latest/g⌋ is not stored: Add
// keeps latest inside the granule and Shift moves a bucket to the granule of its new latest.
//
// A log keeps its buckets in one of two forms:
//
//   - compact (the usual one): one word per bucket, (latest − base)<<16 | count, where base is
//     an instant of the log at most the earliest instant a record can still be dated at
//     (hw − W + 1, see Add). Offsets stay below 2^48 ns (about 3.26 days): move rebases
//     (base = hw − W + 1, the offset subtracted from every word) when hw − base passes 2^48 − 1,
//     which after the last rebase is at least 2^48 − W ≥ 2^47 ns (39 h) of log time later, so
//     a rebase, O(buckets), is rare.
//   - wide: two words per bucket, latest and count, as int64. A log is wide from the start when
//     its window is longer than compactMaxWindow, and becomes wide for good when a value does
//     not fit a compact word: a count above 65 535 (or below 0), an offset outside [0, 2^48).
//     Widening copies every value as it is, so no answer changes.
//
// Every instant is kept to the nanosecond in both forms.
const (
	countBits = 16
	// maxCount is the largest count a compact bucket holds.
	maxCount = 1<<countBits - 1
	// maxOffset is the largest latest − base a compact bucket holds, ns (2^48 − 1).
	maxOffset = 1<<(64-countBits) - 1
	// compactMaxWindow is the longest effective window kept compact: 2^47 ns, about 39 h 5 min,
	// so a day window with hours of margin is compact. It leaves 2^48 − 2^47 of headroom for the
	// offsets between two rebases (a rebase starts every offset below W), so rebases happen at
	// most once per 39 h of log time whatever the window.
	compactMaxWindow = 1 << 47
	// wideBase in Log.base marks a wide log (a compact log's base is never MaxInt64: it is at
	// most hw − W + 1 < MaxInt64 when it is set, and Shift moves it only with hw).
	wideBase = math.MaxInt64
	// minBuckets is the smallest ring, in buckets.
	minBuckets = 4
	// maxRing bounds the ring's capacity in buckets so that head and size fit a uint32. A ring
	// that large holds 16 GiB; a log never reaches it (add folds buckets if one does).
	maxRing = math.MaxInt32
)

// bucketBytes is the most heap a bucket takes, bytes: two words in a wide log, one in a compact
// one (Cost adds the ring's size-class rounding on top).
const bucketBytes = 16

// logBytes is unsafe.Sizeof(Log{}) on 64-bit platforms, a Go size class (TestLogIsOneSizeClass
// checks it).
const logBytes = 80

// Log is the rolling-window Counter for one rule and one key: a deque of time buckets ordered
// by granule, oldest first. It holds at most W/g + 1 buckets (the +1 is the bucket that
// straddles the trailing edge of the window), whatever the request rate, in a ring that grows
// by a quarter as needed and shrinks when most of it is unused; a bucket takes 8 bytes (16 in a
// wide log, see above), the Log itself 80.
//
// The zero Log is not usable; make one with NewLog (or Init or InitBuffer one in place). A Log
// is not safe for concurrent use.
type Log struct {
	// ring holds the buckets, capacity × (1 or 2 in a wide log) words; cap(ring) is what was
	// allocated (a Go size class, or the buffer given to InitBuffer), for Cost. Its length is 0
	// until the log has seen an instant (nil, or InitBuffer's buffer waiting to be used), and
	// never 0 after: a ring of length 0 is the log that has seen nothing.
	ring   []uint64
	window int64 // effective window, ns
	gran   int64 // bucket width, ns
	total  int64 // sum of counts of the buckets in use
	hw     int64 // latest instant seen by any operation (ns); the log's "now"
	base   int64 // compact: the instant offsets are counted from; wideBase: the log is wide
	start  int64 // first instant of the newest bucket's granule, while there is a bucket
	head   uint32
	size   uint32 // buckets in use
}

// NewLog returns an empty log for a window of w with buckets of width g. w must be a positive
// whole multiple of g (Rule.Validate checks this).
func NewLog(w, g time.Duration) *Log {
	l := new(Log)
	l.Init(w, g)
	return l
}

// Init makes l an empty log for a window of w with buckets of width g, as NewLog does, in place:
// a store can keep a Log inside an object of its own (one allocation, and the log beside what
// locks it). w must be a positive whole multiple of g. Init on a Log in use forgets its buckets.
func (l *Log) Init(w, g time.Duration) {
	*l = Log{window: int64(w), gran: int64(g)}
	if w > compactMaxWindow {
		l.base = wideBase
	}
}

// InitBuffer is Init with buf as the log's first ring: a store that keeps the Log inside an
// object of its own can keep its first few buckets there too (one allocation less a key, and
// one cache line less to miss). Once the log has seen an instant it keeps up to
// min(len(buf), W/g + 1) buckets in buf, if it is compact (its window at most about 39 h) and
// buf holds at least 4 buckets (8 bytes each); otherwise it ignores buf. It leaves buf for
// good, for a ring of its own, when it needs more buckets, when it widens (a bucket of more
// than 65 535 requests), and on UnmarshalBinary or Init. Cost counts buf while the log uses it
// or waits to (InBuffer): once the log has left it, its bytes are the caller's to count.
func (l *Log) InitBuffer(w, g time.Duration, buf []uint64) {
	l.Init(w, g)
	if l.base != wideBase && len(buf) >= minBuckets {
		l.ring = buf[:0:len(buf)]
	}
}

// InBuffer reports whether buf is the log's ring (InitBuffer), or will be once the log has
// seen an instant.
func (l *Log) InBuffer(buf []uint64) bool {
	return len(buf) != 0 && cap(l.ring) == len(buf) && unsafe.SliceData(l.ring) == unsafe.SliceData(buf)
}

// capacity returns how many buckets the ring holds.
func (l *Log) capacity() uint32 {
	if l.base == wideBase {
		return uint32(len(l.ring) / 2)
	}
	return uint32(len(l.ring))
}

// slot returns the ring slot of the i-th bucket, oldest first.
func (l *Log) slot(i int) uint32 {
	s := l.head + uint32(i)
	if c := l.capacity(); s >= c {
		s -= c
	}
	return s
}

// get returns the latest instant and the count of the bucket in slot s.
func (l *Log) get(s uint32) (latest, count int64) {
	if l.base == wideBase {
		return int64(l.ring[2*s]), int64(l.ring[2*s+1])
	}
	w := l.ring[s]
	return l.base + int64(w>>countBits), int64(w & maxCount)
}

// put stores a bucket in slot s, widening the log first if the values do not fit a word.
func (l *Log) put(s uint32, latest, count int64) {
	if l.base != wideBase {
		if off := uint64(latest - l.base); off <= maxOffset && uint64(count) <= maxCount {
			l.ring[s] = off<<countBits | uint64(count)
			return
		}
		l.widen()
	}
	l.ring[2*s], l.ring[2*s+1] = uint64(latest), uint64(count)
}

// copySlot copies the bucket in slot from to slot to.
func (l *Log) copySlot(to, from uint32) {
	if l.base == wideBase {
		l.ring[2*to], l.ring[2*to+1] = l.ring[2*from], l.ring[2*from+1]
		return
	}
	l.ring[to] = l.ring[from]
}

// alloc returns a ring for n ≤ W/g + 1 buckets in the log's form; only its capacity (len) is
// set, no bucket. The capacity takes in the rest of the Go size class the allocation falls in
// (which Cost counts either way), up to W/g + 1 buckets: a ring never holds more buckets than
// the window allows, so Add folds buckets exactly when the previous log did.
func (l *Log) alloc(n int) []uint64 {
	stride := 1
	if l.base == wideBase {
		stride = 2
	}
	most := min(l.window/l.gran+1, maxRing)
	r := slices.Grow([]uint64(nil), int(min(int64(n), most))*stride)
	return r[:min(int64(cap(r)/stride), most)*int64(stride)]
}

// relayout moves the buckets to a new ring of at least n ≥ size buckets, oldest in slot 0.
func (l *Log) relayout(n int) {
	r := l.alloc(n)
	for i := range int(l.size) {
		s := l.slot(i)
		if l.base == wideBase {
			r[2*i], r[2*i+1] = l.ring[2*s], l.ring[2*s+1]
		} else {
			r[i] = l.ring[s]
		}
	}
	l.ring, l.head = r, 0
}

// widen turns a compact log wide, keeping every slot where it is; one-way.
func (l *Log) widen() {
	r := slices.Grow([]uint64(nil), 2*len(l.ring))[:2*len(l.ring)]
	for i := range int(l.size) {
		s := l.slot(i)
		latest, count := l.get(s)
		r[2*s], r[2*s+1] = uint64(latest), uint64(count)
	}
	l.ring, l.base = r, wideBase
}

// rebase moves a compact log's base to hw − W + 1, the earliest instant a record can be dated
// at (Add), so that offsets start again below W; a log whose buckets do not fit from there
// (only a decoded state can hold such buckets) widens instead.
func (l *Log) rebase() {
	nb := l.hw - l.window + 1
	if nb == wideBase { // W = 1 ns at the last instant: any lower base serves
		nb--
	}
	for i := range int(l.size) {
		if latest, _ := l.get(l.slot(i)); uint64(latest-nb) > maxOffset {
			l.widen()
			return
		}
	}
	d := uint64(nb-l.base) << countBits
	for i := range int(l.size) {
		l.ring[l.slot(i)] -= d
	}
	l.base = nb
}

// move sets the log's time to t, later than hw or the first instant the log sees, dropping
// what stops counting. Callers test t > hw || len(ring) == 0 first, so that the usual query at
// the log's own time costs one comparison.
func (l *Log) move(t int64) {
	l.hw = t
	if len(l.ring) == 0 {
		if b := l.ring[:cap(l.ring)]; len(b) != 0 {
			l.ring = b[:min(int64(len(b)), l.window/l.gran+1)] // the buffer given to InitBuffer
		} else {
			l.ring = l.alloc(minBuckets)
		}
		if l.base != wideBase {
			l.rebase() // the first instant: base at the earliest a record can be dated
		}
		return
	}
	if l.size > 0 {
		if latest, _ := l.get(l.head); latest+l.window <= t {
			l.prune(t)
		}
	}
	if l.base != wideBase && uint64(t-l.base) > maxOffset {
		l.rebase()
	}
}

// prune drops the buckets whose latest request no longer counts at t (latest+W ≤ t), and
// shrinks the ring when three quarters of it or more are unused.
func (l *Log) prune(t int64) {
	if l.size == 0 {
		return
	}
	c, dropped := l.capacity(), false
	for l.size > 0 {
		latest, count := l.get(l.head)
		if latest+l.window > t {
			break
		}
		l.total -= count
		if l.head++; l.head == c {
			l.head = 0
		}
		l.size--
		dropped = true
	}
	// A ring shrunk to twice the buckets left must gain as many buckets again before it grows,
	// or lose half before it shrinks: amortised O(1) per bucket.
	if dropped && c > minBuckets && l.size <= c/4 {
		l.relayout(max(minBuckets, 2*int(l.size)))
	}
}

// grow makes room for one more bucket, growing the ring by a quarter up to W/g + 1 buckets;
// it reports false when the ring is already that large.
func (l *Log) grow() bool {
	c := int64(l.capacity())
	if int64(l.size) < c {
		return true
	}
	most := min(l.window/l.gran+1, maxRing)
	if c >= most {
		return false
	}
	l.relayout(int(min(max(minBuckets, c+c/4+1), most)))
	return true
}

// Add records n requests at instant now. Entries may arrive out of order; the result depends
// only on which instants were recorded. A record dated so early that it would no longer count
// at the latest instant the log has seen counts at that latest instant instead: it is never
// dropped (docs/rules.md#window-semantics).
func (l *Log) Add(now time.Time, n int) { l.AddNanos(now.UnixNano(), n) }

// AddNanos is Add at instant t, Unix ns (see engine.Strategy.Nanos).
func (l *Log) AddNanos(t int64, n int) {
	if t > l.hw || len(l.ring) == 0 {
		l.move(t)
	}
	if t+l.window <= l.hw {
		t = l.hw
	}
	// The usual case: a record in the newest bucket's granule.
	if l.size > 0 && uint64(t-l.start) < uint64(l.gran) {
		s := l.head + l.size - 1
		if l.base == wideBase {
			if c := uint32(len(l.ring) / 2); s >= c {
				s -= c
			}
			if t > int64(l.ring[2*s]) {
				l.ring[2*s] = uint64(t)
			}
			l.ring[2*s+1] += uint64(n)
			l.total += int64(n)
			return
		}
		if s >= uint32(len(l.ring)) {
			s -= uint32(len(l.ring))
		}
		w := l.ring[s]
		// n < 0 wraps c past maxCount unless the count stays ≥ 0: the exact sum either way.
		c := w&maxCount + uint64(n)
		if t > l.base+int64(w>>countBits) {
			w = uint64(t-l.base) << countBits
			if uint64(t-l.base) > maxOffset {
				c = maxCount + 1 // the general case widens the log
			}
		} else {
			w &^= maxCount
		}
		if c <= maxCount {
			l.ring[s] = w | c
			l.total += int64(n)
			return
		}
	}
	l.add(t, int64(n))
}

// add is Add's general case: a record in any granule, or a count that widens the log.
func (l *Log) add(t, n int64) {
	idx := floorDiv(t, l.gran)
	l.total += n
	// Walk back from the newest bucket: in-order writes stop at the first step.
	i := int(l.size) - 1
	for ; i >= 0; i-- {
		s := l.slot(i)
		latest, count := l.get(s)
		if k := floorDiv(latest, l.gran); k == idx {
			l.put(s, max(latest, t), count+n)
			return
		} else if k < idx {
			break
		}
	}
	if !l.grow() {
		// Unreachable while every live bucket lies in (hw−W, hw]; kept so that a broken
		// invariant costs lateness, not memory. Fold the oldest bucket into its neighbour:
		// its requests are then held a little longer, never released early.
		if i < 0 {
			s := l.slot(0)
			latest, count := l.get(s)
			l.put(s, latest, count+n)
			return
		}
		first, second := l.slot(0), l.slot(1)
		_, c0 := l.get(first)
		latest, c1 := l.get(second)
		l.put(second, latest, c1+c0)
		if l.head++; l.head == l.capacity() {
			l.head = 0
		}
		l.size--
		i--
	}
	// Insert after position i, shifting newer buckets one place towards the back.
	for j := int(l.size); j > i+1; j-- {
		l.copySlot(l.slot(j), l.slot(j-1))
	}
	if i+1 == int(l.size) {
		l.start = idx * l.gran
	}
	l.size++
	l.put(l.slot(i+1), t, n)
}

// Remove takes back up to n requests from the bucket that holds instant at. The bucket keeps
// its latest instant, so what remains in it is never released earlier than before.
func (l *Log) Remove(at time.Time, n int) {
	a := at.UnixNano()
	idx := floorDiv(a, l.gran)
	for i := int(l.size) - 1; i >= 0; i-- {
		s := l.slot(i)
		latest, count := l.get(s)
		if k := floorDiv(latest, l.gran); k == idx {
			k := min(int64(n), count)
			l.put(s, latest, count-k)
			l.total -= k
			return
		} else if k < idx {
			return
		}
	}
}

// Used returns how many recorded requests count at now (or at the latest instant seen, if
// later): those recorded at s with s+W > now, counting each bucket until its latest instant + W.
func (l *Log) Used(now time.Time) int { return l.UsedNanos(now.UnixNano()) }

// UsedNanos is Used at instant t, Unix ns (see engine.Strategy.Nanos).
func (l *Log) UsedNanos(t int64) int {
	if t > l.hw || len(l.ring) == 0 {
		l.move(t)
	}
	return int(l.total)
}

// WaitTime returns the smallest d ≥ 0 such that Used(now+d)+n ≤ limit if nothing more is
// recorded: the time until enough of the oldest buckets have expired. It is measured from the
// later of now and the latest instant seen.
func (l *Log) WaitTime(now time.Time, n, limit int) time.Duration {
	return time.Duration(l.WaitNanos(now.UnixNano(), n, limit))
}

// WaitNanos is WaitTime at instant t, Unix ns, in ns (see engine.Strategy.Nanos).
func (l *Log) WaitNanos(t int64, n, limit int) int64 {
	if t > l.hw || len(l.ring) == 0 {
		l.move(t)
	}
	excess := l.total + int64(n) - int64(limit)
	if excess <= 0 {
		return 0
	}
	var freed int64
	for i := range int(l.size) {
		latest, count := l.get(l.slot(i))
		freed += count
		if freed >= excess {
			return latest + l.window - l.hw
		}
	}
	// n > limit: never reached through Strategy, which refuses such bursts.
	return l.window
}

// Shift moves the log's latest instant and every bucket's latest instant by d, keeping the
// intervals between them, so each bucket stops counting exactly d from when it would have.
// A bucket goes to the granule of its shifted latest instant; when d is not a whole number of
// granules two neighbouring buckets can land in one granule, and they merge (count summed,
// the later instant kept): the earlier one's requests are then held a little longer, never
// released early. The log holds no more buckets than before.
func (l *Log) Shift(d time.Duration) {
	if len(l.ring) == 0 {
		return
	}
	dd := int64(d)
	l.hw += dd
	// A compact log's offsets hold: moving its base moves every bucket. A wide log's buckets
	// move one by one below (those of a log that widens on the way have moved already).
	if l.base != wideBase && l.base+dd == wideBase {
		l.widen() // the shifted base would read as the wide mark
	}
	wide := l.base == wideBase
	if !wide {
		l.base += dd
	}
	w, prev := 0, int64(0) // buckets kept so far, and the granule of the last one kept
	for i := range int(l.size) {
		latest, count := l.get(l.slot(i))
		if wide {
			latest += dd
		}
		k := floorDiv(latest, l.gran)
		if w > 0 && k == prev {
			p := l.slot(w - 1)
			pl, pc := l.get(p)
			l.put(p, max(pl, latest), pc+count)
			continue
		}
		l.put(l.slot(w), latest, count)
		w, prev = w+1, k
	}
	l.size = uint32(w)
	if w > 0 {
		l.start = prev * l.gran
	}
}

// Expiry returns the instant at which the newest bucket stops counting, or the zero time when
// the log is empty.
func (l *Log) Expiry() time.Time {
	if l.size == 0 {
		return time.Time{}
	}
	latest, _ := l.get(l.slot(int(l.size) - 1))
	return time.Unix(0, latest+l.window)
}

// Latest returns the latest instant the log has seen, or the zero time.
func (l *Log) Latest() time.Time {
	if len(l.ring) == 0 {
		return time.Time{}
	}
	return time.Unix(0, l.hw)
}

// LatestNanos returns the latest instant the log has seen, Unix ns, and true; 0 and false
// when none (see engine.Strategy.Nanos).
func (l *Log) LatestNanos() (int64, bool) { return l.hw, len(l.ring) != 0 }

// Cost returns the bytes the log holds on the heap: the Log and its ring's allocation, rounded
// up to the Go size class it was allocated in (8 bytes a bucket in a compact log, 16 wide).
func (l *Log) Cost() int { return logBytes + 8*cap(l.ring) }

// Buckets returns the number of buckets held, for tests of the memory bound.
func (l *Log) Buckets() int { return int(l.size) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

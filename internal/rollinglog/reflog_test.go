// The rolling-window log as it was before the compact form (issue 17): int64 buckets that keep
// their granule, in a doubling ring. The differential tests and benchmarks check the Log against
// it; only names changed.

package rollinglog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// refBucket is the requests recorded in one granule [index·g, (index+1)·g): how many, and the latest
// instant among them (Unix nanoseconds). The refBucket counts until latest+W, so none of its
// requests is released before its own s+W (never early), and one that shares its granule
// with later ones is held at most g too long.
type refBucket struct {
	index  int64
	latest int64
	count  int64
}

// refBucketBytes is the size of one refBucket in memory, for Cost.
const refBucketBytes = 24

// refLog is the rolling-window Counter for one rule and one key: a deque of time buckets ordered
// by granule, oldest first. It holds at most W/g + 1 buckets (the +1 is the refBucket that
// straddles the trailing edge of the window), whatever the request rate.
//
// The zero refLog is not usable; make one with newRefLog. A refLog is not safe for concurrent use.
type refLog struct {
	window int64 // effective window, ns
	gran   int64 // refBucket width, ns
	max    int   // most buckets kept: window/gran + 1
	ring   []refBucket
	head   int   // index of the oldest refBucket in ring
	size   int   // buckets in use
	total  int64 // sum of counts of the buckets in use
	hw     int64 // latest instant seen by any operation (ns); the log's "now"
	seen   bool  // whether hw is set
}

// newRefLog returns an empty log for a window of w with buckets of width g. w must be a positive
// whole multiple of g (Rule.Validate checks this).
func newRefLog(w, g time.Duration) *refLog {
	return &refLog{window: int64(w), gran: int64(g), max: int(w/g) + 1}
}

func (l *refLog) at(i int) *refBucket { return &l.ring[(l.head+i)%len(l.ring)] }

// advance moves the log's time to t if t is later, dropping what stops counting, and returns
// the log's time: queries are answered there, never in the past.
func (l *refLog) advance(t int64) int64 {
	if !l.seen || t > l.hw {
		l.hw, l.seen = t, true
		l.prune(t)
	}
	return l.hw
}

// prune drops the buckets whose latest request no longer counts at t (latest+W ≤ t).
func (l *refLog) prune(t int64) {
	for l.size > 0 {
		b := l.at(0)
		if b.latest+l.window > t {
			return
		}
		l.total -= b.count
		l.head = (l.head + 1) % len(l.ring)
		l.size--
	}
}

// grow makes room for one more refBucket, doubling the ring up to max; it reports false when the
// ring is already at max.
func (l *refLog) grow() bool {
	if l.size < len(l.ring) {
		return true
	}
	if len(l.ring) >= l.max {
		return false
	}
	n := min(max(4, 2*len(l.ring)), l.max)
	ring := make([]refBucket, n)
	for i := 0; i < l.size; i++ {
		ring[i] = *l.at(i)
	}
	l.ring, l.head = ring, 0
	return true
}

// Add records n requests at instant now. Entries may arrive out of order; the result depends
// only on which instants were recorded. A record dated so early that it would no longer count
// at the latest instant the log has seen counts at that latest instant instead: it is never
// dropped (docs/rules.md#window-semantics).
func (l *refLog) Add(now time.Time, n int) {
	t := now.UnixNano()
	if hw := l.advance(t); t+l.window <= hw {
		t = hw
	}
	idx := refFloorDiv(t, l.gran)
	l.total += int64(n)
	// Walk back from the newest refBucket: in-order writes stop at the first step.
	i := l.size - 1
	for ; i >= 0; i-- {
		b := l.at(i)
		if b.index == idx {
			b.count += int64(n)
			b.latest = max(b.latest, t)
			return
		}
		if b.index < idx {
			break
		}
	}
	if !l.grow() {
		// Unreachable while every live refBucket lies in (hw−W, hw]; kept so that a broken
		// invariant costs lateness, not memory. Fold the oldest refBucket into its neighbour:
		// its requests are then held a little longer, never released early.
		if i < 0 {
			l.at(0).count += int64(n)
			return
		}
		second := l.at(1)
		second.count += l.at(0).count
		l.head = (l.head + 1) % len(l.ring)
		l.size--
		i--
	}
	// Insert after position i, shifting newer buckets one place towards the back.
	for j := l.size; j > i+1; j-- {
		*l.at(j) = *l.at(j - 1)
	}
	*l.at(i + 1) = refBucket{index: idx, latest: t, count: int64(n)}
	l.size++
}

// Remove takes back up to n requests from the refBucket that holds instant at. The refBucket keeps
// its latest instant, so what remains in it is never released earlier than before.
func (l *refLog) Remove(at time.Time, n int) {
	idx := refFloorDiv(at.UnixNano(), l.gran)
	for i := l.size - 1; i >= 0; i-- {
		b := l.at(i)
		if b.index == idx {
			k := min(int64(n), b.count)
			b.count -= k
			l.total -= k
			return
		}
		if b.index < idx {
			return
		}
	}
}

// Used returns how many recorded requests count at now (or at the latest instant seen, if
// later): those recorded at s with s+W > now, counting each refBucket until its latest instant + W.
func (l *refLog) Used(now time.Time) int {
	l.advance(now.UnixNano())
	return int(l.total)
}

// WaitTime returns the smallest d ≥ 0 such that Used(now+d)+n ≤ limit if nothing more is
// recorded: the time until enough of the oldest buckets have expired. It is measured from the
// later of now and the latest instant seen.
func (l *refLog) WaitTime(now time.Time, n, limit int) time.Duration {
	t := l.advance(now.UnixNano())
	excess := l.total + int64(n) - int64(limit)
	if excess <= 0 {
		return 0
	}
	var freed int64
	for i := 0; i < l.size; i++ {
		b := l.at(i)
		freed += b.count
		if freed >= excess {
			return time.Duration(b.latest + l.window - t)
		}
	}
	// n > limit: never reached through Strategy, which refuses such bursts.
	return time.Duration(l.window)
}

// Shift moves the log's latest instant and every refBucket's latest instant by d, keeping the
// intervals between them, so each refBucket stops counting exactly d from when it would have.
// A refBucket goes to the granule of its shifted latest instant; when d is not a whole number of
// granules two neighbouring buckets can land in one granule, and they merge (count summed,
// the later instant kept): the earlier one's requests are then held a little longer, never
// released early. The log holds no more buckets than before.
func (l *refLog) Shift(d time.Duration) {
	if !l.seen {
		return
	}
	dd := int64(d)
	l.hw += dd
	w := 0 // buckets kept so far; w ≤ i, so writing at w never overwrites one not yet read
	for i := 0; i < l.size; i++ {
		b := *l.at(i)
		b.latest += dd
		b.index = refFloorDiv(b.latest, l.gran)
		if w > 0 {
			if p := l.at(w - 1); p.index == b.index {
				p.count += b.count
				p.latest = max(p.latest, b.latest)
				continue
			}
		}
		*l.at(w) = b
		w++
	}
	l.size = w
}

// Expiry returns the instant at which the newest refBucket stops counting, or the zero time when
// the log is empty.
func (l *refLog) Expiry() time.Time {
	if l.size == 0 {
		return time.Time{}
	}
	return time.Unix(0, l.at(l.size-1).latest+l.window)
}

// Latest returns the latest instant the log has seen, or the zero time.
func (l *refLog) Latest() time.Time {
	if !l.seen {
		return time.Time{}
	}
	return time.Unix(0, l.hw)
}

// Cost returns the approximate bytes held by the log.
func (l *refLog) Cost() int { return 80 + refBucketBytes*len(l.ring) }

// Buckets returns the number of buckets held, for tests of the memory bound.
func (l *refLog) Buckets() int { return l.size }

func refFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// MarshalBinary encodes the log's buckets and latest instant, for stores that keep state as
// bytes (the SQLite store). The window and granularity are not encoded: they come from the
// rule the log is remade for. It implements encoding.BinaryMarshaler and never fails.
func (l *refLog) MarshalBinary() ([]byte, error) {
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
func (l *refLog) UnmarshalBinary(data []byte) error {
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
	ring := make([]refBucket, n)
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
		ring[i] = refBucket{index: v[0], latest: v[1], count: v[2]}
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

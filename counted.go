package ratemonitor

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// limits is what one attempt is counted under: the Transport's rules on the request's key and
// its meters, less any counters a Transport wrapping this one has already counted the attempt
// in. A nil strat means nothing is left to count on the key; meters holds a charge per meter
// left to count (nil without meters), in the Transport's order of meters.
type limits struct {
	strat  *engine.Strategy
	meters []meterCharge
}

// meterCharge is an attempt's charge on one meter: the meter's rules left to count (strat), its
// key there, what the attempt costs there, and the instant the store recorded it at (zero when
// recorded in monitoring mode, or not yet).
type meterCharge struct {
	m     *meter
	strat *engine.Strategy
	key   string
	n     int
	at    time.Time
}

// allLimits returns every limit of t for a request on key.
func (t *Transport) allLimits(key string) limits {
	if len(t.meters) == 0 {
		return limits{strat: t.strat} // small enough to inline: the common path
	}
	return t.meterLimits(key)
}

// meterLimits is allLimits with meters: a charge of 1 on each. Never inlined, so that
// allLimits is. In monitoring mode, when every meter has an app key and every request costs 1,
// the charges are the same for every request and nothing writes them (only pacing, a cost and a
// mark from further out do: uncounted copies before it changes them), so they are made once,
// in New (costing.fixed), and a request allocates nothing for them.
//
//go:noinline
func (t *Transport) meterLimits(key string) limits {
	if t.costs.fixed != nil {
		return limits{strat: t.strat, meters: t.costs.fixed}
	}
	return t.freshLimits(key)
}

// freshLimits is allLimits with charges of its own, which the caller may change.
func (t *Transport) freshLimits(key string) limits {
	mc := make([]meterCharge, len(t.meters))
	for i, m := range t.meters {
		mc[i] = meterCharge{m: m, strat: m.strat, key: m.keyFor(key), n: 1}
	}
	return limits{strat: t.strat, meters: mc}
}

// none reports whether nothing is left to count.
func (l limits) none() bool { return l.strat == nil && len(l.meters) == 0 }

// countedContext is the context key of an attempt's countMark.
type countedContext struct{}

// countMark travels in the context of an attempt that a Transport has counted, to the
// RoundTripper it wraps: when that is another Transport over the same store (layered windows,
// the way the PHP original stacks a minute and an hour decorator), it counts the attempt only in
// the counters the outer one did not. Each counter of a mark is taken once, by the first
// Transport inside to meet the mark: the counters it keeps itself it skips, the others it
// passes on in its own mark, for the Transports further in. A second attempt carrying the same
// mark (a retry between the two Transports, or a failover or hedge to another inner Transport)
// finds nothing left and is a new attempt, counted in full. (Taking a mark once per inner
// Transport, as before, left an attempt failed over to a second inner Transport uncounted in
// the outer one's counters.)
//
// A mark is valid only while the marking Transport's call to its base runs (done): it outlives
// that call in the context of the response's Request, and a request built on that context (a
// pagination loop carrying it along), through the same Transport or another over the store,
// would otherwise take it as counted further out and go uncounted. A Transport inside reads the
// mark when the request reaches it, during that call; an attempt that reaches it after the call
// returned (a hedge or retry left running) finds the mark done and is counted in full: an
// over-count, never an under-count.
type countMark struct {
	context.Context // the attempt's context, which the mark extends (one allocation for both)

	store   any // the marking Transport's share.id
	counted counters
	// cost is what the marking Transport charged the attempt in the counters it counted it in
	// (0: not charged there, as a Reservation's slot), so that a Transport inside with
	// WithCostReport can correct that charge when it finds all its counters counted.
	cost int
	// corrects says the marking Transport has WithCostReport and corrects its charge itself: a
	// Transport inside leaves it alone, or the correction up would be made twice.
	corrects bool
	parent   *countMark  // the mark of a Transport further out, over another store
	taken    atomic.Bool // an attempt through a Transport inside has taken the counters
	done     atomic.Bool // the marking Transport's call to its base has returned: the mark is void
	inline   [4]countedOn
}

// Value returns the mark itself for countedContext, and otherwise what the attempt's context
// holds.
func (m *countMark) Value(k any) any {
	if _, ok := k.(countedContext); ok {
		return m
	}
	return m.Context.Value(k)
}

// countedOn says that an attempt was counted in every counter of strat on key.
type countedOn struct {
	key   string
	strat *engine.Strategy
}

// counters is what a mark says an attempt was counted in; it holds a few entries at most.
type counters []countedOn

// has reports whether counter id on key is among c.
func (c counters) has(key, id string) bool {
	for _, e := range c {
		if e.key != key {
			continue
		}
		for j := range e.strat.Slots() {
			if e.strat.CounterID(j) == id {
				return true
			}
		}
	}
	return false
}

// markFrom returns ctx's mark, if any.
func markFrom(ctx context.Context) *countMark {
	m, _ := ctx.Value(countedContext{}).(*countMark)
	return m
}

// live returns m or the first mark outside it whose marking call is still running (nil: none).
func (m *countMark) live() *countMark {
	for m != nil && m.done.Load() {
		m = m.parent
	}
	return m
}

// uncounted returns what is left of t's limits for an attempt on key carrying mark m (nil: no
// mark), the counters Transports further out, over t's store, counted this attempt in (nil
// when none did, or their mark was already taken by an earlier attempt), for t to pass on,
// and the mark that said so (for outerCharge). Marks whose call has returned (done) are
// skipped: they count nothing now.
func (t *Transport) uncounted(m *countMark, key string) (limits, counters, *countMark) {
	lim := t.allLimits(key)
	for m = m.live(); m != nil && !t.sameStore(m.store); m = m.parent.live() {
	}
	if m == nil || m.taken.Swap(true) {
		return lim, nil, nil
	}
	lim.strat = t.strat.Without(func(id string) bool { return m.counted.has(key, id) })
	left := make([]meterCharge, 0, len(lim.meters)) // lim.meters may be costing.fixed
	for _, c := range lim.meters {
		if c.strat = c.strat.Without(func(id string) bool { return m.counted.has(c.key, id) }); c.strat != nil {
			left = append(left, c)
		}
	}
	lim.meters = left
	return lim, m.counted, m
}

// marked returns req with a mark saying that the attempt is counted in the counters outer names
// (counted further out, see uncounted) and, when self is set, in every counter of t on key and
// of the meters charged (every meter of t when all is set, else those of charged: a meter that
// does not apply to the request counted nothing), for a Transport that base may be. cost is what t charged the attempt (0:
// nothing, or one Reservation slot), for outerCharge. Marks of other stores stay in the chain.
// When no Transport further in can read the mark (needsMark: base is a net/http Transport, or
// t is alone on its store) and no outer counters are to be passed on, req is returned as it is.
// Marking costs two allocations (the mark with its context, and the request's shallow copy).
func (t *Transport) marked(base http.RoundTripper, req *http.Request, key string, outer counters, self bool, cost int, all bool, charged []meterCharge) *http.Request {
	if _, ok := base.(*http.Transport); ok {
		return req
	}
	if len(outer) == 0 && (!self || !t.needsMark(base)) {
		return req
	}
	ctx := req.Context()
	// Void marks further out are left out of the chain: a pagination loop would otherwise
	// lengthen it with every page.
	m := &countMark{Context: ctx, store: t.share.id, parent: markFrom(ctx).live()}
	m.counted = append(m.inline[:0], outer...)
	if self {
		m.counted = append(m.counted, countedOn{key: key, strat: t.strat})
		if all {
			for _, mt := range t.meters {
				m.counted = append(m.counted, countedOn{key: mt.keyFor(key), strat: mt.strat})
			}
		}
		for _, c := range charged {
			m.counted = append(m.counted, countedOn{key: c.key, strat: c.m.strat})
		}
	}
	if cost > 0 {
		m.cost, m.corrects = cost, t.costs.report != nil
	}
	return req.WithContext(m)
}

// meterLeft returns what is left of m's rules in lim, nil when nothing is.
func meterLeft(lim limits, m *meter) *engine.Strategy {
	for _, c := range lim.meters {
		if c.m == m {
			return c.strat
		}
	}
	return nil
}

// sendMarked sends req, which marked made from orig, and voids its mark (if marked made one)
// once base returns, or panics: see countMark.
func (t *Transport) sendMarked(base http.RoundTripper, orig, req *http.Request, key string, ch *charge) (*http.Response, error) {
	if req != orig {
		if m, ok := req.Context().(*countMark); ok {
			defer m.done.Store(true)
		}
	}
	return t.send(base, req, key, ch)
}

// unreserveCounted gives back, in the counters a Transport further out over t's store has
// already counted this attempt in (those lim lacks), the slot of r the attempt spends: that
// slot was recorded there by Reserve, and the outer Transport recorded the attempt again. The
// outer record, at the send, is the later one, so the count is never released early. A store
// error leaves the slot held until it expires (an over-count, never an under-count).
func (t *Transport) unreserveCounted(ctx context.Context, r *Reservation, lim limits, outer counters) {
	if len(outer) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if lim.strat != t.strat {
		if s := t.strat.Without(func(id string) bool { return !outer.has(r.key, id) }); s != nil {
			t.releaseIn(ctx, r.gen, s, r.key, r.at, 1)
		}
	}
	for i, m := range t.meters {
		mk := m.keyFor(r.key)
		if s := m.strat.Without(func(id string) bool { return !outer.has(mk, id) }); s != nil && meterLeft(lim, m) != m.strat {
			t.releaseIn(ctx, r.gen, s, mk, r.meterAt[i], 1)
		}
	}
}

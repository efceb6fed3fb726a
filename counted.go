package ratemonitor

import (
	"context"
	"net/http"
	"sync"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// limits is what one attempt is counted under: the Transport's rules on the request's key and
// its app rules, less any counters a Transport wrapping this one has already counted the attempt
// in. A nil strat means nothing is left to count on the key; a nil app, nothing on the app key.
type limits struct {
	strat *strategy.Strategy
	app   *appLimit
}

func (t *Transport) allLimits() limits { return limits{strat: t.strat, app: t.app} }

// none reports whether nothing is left to count.
func (l limits) none() bool { return l.strat == nil && l.app == nil }

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
type countMark struct {
	store   cache.Store
	counted map[string]bool // key + "\x00" + counter ID
	parent  *countMark      // the mark of a Transport further out, over another store

	mu    sync.Mutex
	taken bool // an attempt through a Transport inside has taken the counters
}

func markID(key, counter string) string { return key + "\x00" + counter }

// markFrom returns ctx's mark, if any.
func markFrom(ctx context.Context) *countMark {
	m, _ := ctx.Value(countedContext{}).(*countMark)
	return m
}

// uncounted returns what is left of t's limits for an attempt on key carrying mark m (nil: no
// mark), and the counters Transports further out, over t's store, counted this attempt in (nil
// when none did, or their mark was already taken by an earlier attempt), for t to pass on.
func (t *Transport) uncounted(m *countMark, key string) (limits, map[string]bool) {
	lim := t.allLimits()
	for m != nil && !cache.SameStore(m.store, t.store) {
		m = m.parent
	}
	if m == nil {
		return lim, nil
	}
	m.mu.Lock()
	taken := m.taken
	m.taken = true
	m.mu.Unlock()
	if taken {
		return lim, nil
	}
	lim.strat = t.strat.Without(func(id string) bool { return m.counted[markID(key, id)] })
	if t.app != nil {
		if s := t.app.strat.Without(func(id string) bool { return m.counted[markID(t.app.key, id)] }); s == nil {
			lim.app = nil
		} else if s != t.app.strat {
			lim.app = &appLimit{key: t.app.key, strat: s}
		}
	}
	return lim, m.counted
}

// marked returns req with a mark saying that the attempt is counted in the counters outer names
// (counted further out, see uncounted) and, when self is set, in every counter of t on key and
// on the app key, for a Transport that base may be. Marks of other stores stay in the chain.
// When base is a net/http Transport, which is never one of ours, req is returned as it is.
func (t *Transport) marked(base http.RoundTripper, req *http.Request, key string, outer map[string]bool, self bool) *http.Request {
	if _, ok := base.(*http.Transport); ok {
		return req
	}
	if !self && len(outer) == 0 {
		return req
	}
	m := &countMark{store: t.store, counted: map[string]bool{}, parent: markFrom(req.Context())}
	for id := range outer {
		m.counted[id] = true
	}
	if self {
		for j := range t.strat.Slots() {
			m.counted[markID(key, t.strat.CounterID(j))] = true
		}
		if t.app != nil {
			for j := range t.app.strat.Slots() {
				m.counted[markID(t.app.key, t.app.strat.CounterID(j))] = true
			}
		}
	}
	return req.WithContext(context.WithValue(req.Context(), countedContext{}, m))
}

// unreserveCounted gives back, in the counters a Transport further out over t's store has
// already counted this attempt in (those lim lacks), the slot of r the attempt spends: that
// slot was recorded there by Reserve, and the outer Transport recorded the attempt again. The
// outer record, at the send, is the later one, so the count is never released early. A store
// error leaves the slot held until it expires (an over-count, never an under-count).
func (t *Transport) unreserveCounted(ctx context.Context, r *Reservation, lim limits, outer map[string]bool) {
	if len(outer) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if lim.strat != t.strat {
		if s := t.strat.Without(func(id string) bool { return !outer[markID(r.key, id)] }); s != nil {
			t.releaseOn(ctx, s, r.key, r.at, 1)
		}
	}
	if t.app != nil && (lim.app == nil || lim.app.strat != t.app.strat) {
		if s := t.app.strat.Without(func(id string) bool { return !outer[markID(t.app.key, id)] }); s != nil {
			t.releaseOn(ctx, s, t.app.key, r.appAt, 1)
		}
	}
}

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
// the counters the outer one did not. A Transport uses a mark once: a second attempt through it
// carrying the same mark (a retry between the two Transports) is a new attempt, counted in full.
type countMark struct {
	store   cache.Store
	counted map[string]bool // key + "\x00" + counter ID
	parent  *countMark      // the mark of a Transport further out, over another store

	mu   sync.Mutex
	used map[*Transport]bool
}

func markID(key, counter string) string { return key + "\x00" + counter }

// markFrom returns ctx's mark, if any.
func markFrom(ctx context.Context) *countMark {
	m, _ := ctx.Value(countedContext{}).(*countMark)
	return m
}

// uncounted returns what is left of t's limits for an attempt on key carrying mark m (nil: no
// mark), and the mark of t's store in m's chain when it applies to this attempt (first use by
// t), or nil.
func (t *Transport) uncounted(m *countMark, key string) (limits, *countMark) {
	lim := t.allLimits()
	for m != nil && !cache.SameStore(m.store, t.store) {
		m = m.parent
	}
	if m == nil {
		return lim, nil
	}
	m.mu.Lock()
	stale := m.used[t]
	if !stale {
		if m.used == nil {
			m.used = map[*Transport]bool{}
		}
		m.used[t] = true
	}
	m.mu.Unlock()
	if stale {
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
	return lim, m
}

// marked returns req with a mark saying that the attempt is counted in every counter of t on key
// (and on the app key), besides those prev (the mark of t's store that applied, or nil) says,
// for a Transport that base may be. Marks of other stores stay in the chain. When base is a
// net/http Transport, which is never one of ours, req is returned as it is.
func (t *Transport) marked(base http.RoundTripper, req *http.Request, key string, prev *countMark) *http.Request {
	if _, ok := base.(*http.Transport); ok {
		return req
	}
	m := &countMark{store: t.store, counted: map[string]bool{}, parent: markFrom(req.Context())}
	if prev != nil {
		for id := range prev.counted {
			m.counted[id] = true
		}
	}
	for j := range t.strat.Slots() {
		m.counted[markID(key, t.strat.CounterID(j))] = true
	}
	if t.app != nil {
		for j := range t.app.strat.Slots() {
			m.counted[markID(t.app.key, t.app.strat.CounterID(j))] = true
		}
	}
	return req.WithContext(context.WithValue(req.Context(), countedContext{}, m))
}

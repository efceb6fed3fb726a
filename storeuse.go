package ratemonitor

import (
	"net/http"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ratemonitor/ratemonitor/cache"
)

// A Transport marks each attempt it counts (countMark, counted.go) so that a Transport further
// in over the same store counts it only in the counters this one did not. Marking costs two
// allocations per request (the mark, and the shallow copy of the request that carries it,
// Request.WithContext), which is most of what a Transport adds to a request. A mark is read
// only by a Transport whose store is the marking one's (cache.SameStore: uncounted skips marks
// of other stores, and they stay in the chain for those further in either way), so a Transport
// that is the only one of the process over its store can send the request as it is: no
// Transport it may reach, directly or through any RoundTripper between them (a retry layer, a
// user's wrapper), would read the mark.
//
// storeUses counts the Transports over each store, by what makes stores one for
// cache.SameStore. A Transport joins at the end of New and leaves when it is garbage
// collected (runtime.AddCleanup), not at Close: a closed Transport over a store it did not
// make still counts its requests there. The one gap: a Transport over the same store made while
// requests are in flight and put, by a RoundTripper whose next hop changes at run time, in the
// way of those requests: they were not marked, and are counted again in the counters both
// keep. That is an over-count of those few requests, never an under-count. A Transport that
// is reached again by its own attempt (its base calls back into it) counts it again too.

// storeUse is the count of one store's Transports.
type storeUse struct {
	id  any         // storeIdentity of the store
	rep cache.Store // the store of the first Transport, for the cache.SameStore check
	n   atomic.Int32
}

var storeUses struct {
	mu sync.Mutex
	m  map[any]*storeUse
}

// storeIdentity returns what makes two stores one for cache.SameStore: the namespace of a
// cache.Namespacer, else the store value itself when it is comparable. A store with neither
// is the same store as no other (nor as itself): marks on it are never read. TestStoreIdentity
// holds this to cache.SameStore.
func storeIdentity(st cache.Store) (any, bool) {
	if n, ok := st.(cache.Namespacer); ok {
		return "ns:" + n.Namespace(), true
	}
	if st == nil || !reflect.TypeOf(st).Comparable() {
		return nil, false
	}
	return st, true
}

// joinStoreUse counts t among the Transports over its store until t is garbage collected.
// When the identity computed here and cache.SameStore disagree (they should not), t marks
// every attempt, as all Transports did before the count.
func (t *Transport) joinStoreUse() {
	id, ok := storeIdentity(t.store)
	if !ok {
		if cache.SameStore(t.store, t.store) {
			t.alwaysMark = true // the two disagree: be safe
		}
		return
	}
	storeUses.mu.Lock()
	u := storeUses.m[id]
	if u == nil {
		if storeUses.m == nil {
			storeUses.m = map[any]*storeUse{}
		}
		u = &storeUse{id: id, rep: t.store}
		storeUses.m[id] = u
	}
	u.n.Add(1)
	storeUses.mu.Unlock()
	if !cache.SameStore(u.rep, t.store) {
		t.alwaysMark = true
	}
	t.use = u
	runtime.AddCleanup(t, leaveStoreUse, u)
}

// leaveStoreUse uncounts a Transport collected, and forgets the store with the last one (the
// entry holds the store value).
func leaveStoreUse(u *storeUse) {
	storeUses.mu.Lock()
	defer storeUses.mu.Unlock()
	if u.n.Add(-1) == 0 && storeUses.m[u.id] == u {
		delete(storeUses.m, u.id)
	}
}

// needsMark reports whether an attempt through t to base must carry a mark for Transports
// further in: not when base is a net/http Transport (never one of ours, and the end of the
// chain), nor when t is the only Transport of the process over its store (see above).
func (t *Transport) needsMark(base http.RoundTripper) bool {
	if _, ok := base.(*http.Transport); ok {
		return false
	}
	return t.shared()
}

// shared reports whether another Transport of the process may use t's store. When none does,
// no Transport further out can have marked an attempt that reaches t (a live outer Transport
// over t's store would be counted), so a mark of t's store in a request's context is stale (a
// context kept from an earlier attempt, made when the store was shared): t need not look for
// one, and counting the attempt in full is right.
func (t *Transport) shared() bool {
	return t.alwaysMark || (t.use != nil && t.use.n.Load() > 1)
}

package ratemonitor

import (
	"net/http"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

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

// The count holds no reference to a store that keeps it alive: it is a global root, and a
// store can hold what holds a Transport (the memory store New makes holds the Transport's
// observer, which may keep the Transport), so a strong reference would keep a closed
// Transport from ever being collected, and its count from ever being left.

// storeUse is the count of one store's Transports.
type storeUse struct {
	id storeKey
	n  atomic.Int32
}

// storeKey is what makes stores one for cache.SameStore, without a strong reference to them:
// the namespace of a cache.Namespacer, or the dynamic type and a weak pointer to the pointee of
// a store that is a pointer (weak pointers made from one pointer are equal, and SameStore
// compares pointer stores by type and pointer).
type storeKey struct {
	ns  string
	typ reflect.Type // nil for a Namespacer
	ptr weak.Pointer[byte]
}

var storeUses struct {
	mu sync.Mutex
	m  map[storeKey]*storeUse
}

// storeIdentity returns the key of st's count: by namespace for a cache.Namespacer (as
// cache.SameStore compares them), by type and pointer for a store that is a pointer. Any other
// store (a struct passed by value, comparable or not) has none: a Transport over it marks
// every attempt (alwaysMark), which is safe and only slower.
// TestStoreIdentityAgreesWithSameStore holds the identity to cache.SameStore where there is one.
func storeIdentity(st cache.Store) (storeKey, bool) {
	if n, ok := st.(cache.Namespacer); ok {
		return storeKey{ns: n.Namespace()}, true
	}
	v := reflect.ValueOf(st)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return storeKey{}, false
	}
	return storeKey{typ: v.Type(), ptr: weak.Make((*byte)(v.UnsafePointer()))}, true
}

// joinStoreUse counts t among the Transports over its store until t is garbage collected. A
// store without an identity here (see storeIdentity) that cache.SameStore may find the same as
// another has t mark every attempt, as all Transports did before the count.
func (t *Transport) joinStoreUse() {
	id, ok := storeIdentity(t.store)
	if !ok {
		if cache.SameStore(t.store, t.store) {
			t.alwaysMark = true
		}
		return
	}
	storeUses.mu.Lock()
	u := storeUses.m[id]
	if u == nil {
		if storeUses.m == nil {
			storeUses.m = map[storeKey]*storeUse{}
		}
		u = &storeUse{id: id}
		storeUses.m[id] = u
	}
	u.n.Add(1)
	storeUses.mu.Unlock()
	t.use = u
	runtime.AddCleanup(t, leaveStoreUse, u)
}

// leaveStoreUse uncounts a Transport collected, and forgets the store with the last one. While
// the count is above zero a Transport holding the store is alive, so a pointer store's entry
// never outlives it.
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

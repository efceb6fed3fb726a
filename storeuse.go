package ratemonitor

import (
	"net/http"
	"reflect"
	"runtime"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/storeshare"
)

// A Transport marks each attempt it counts (countMark, counted.go) so that a Transport further
// in over the same store counts it only in the counters this one did not. Marking costs two
// allocations per request (the mark, and the shallow copy of the request that carries it,
// Request.WithContext), which is most of what a Transport adds to a request. A mark is read
// only by a Transport over the marking one's store (the same share.id: uncounted skips marks of
// other stores, and they stay in the chain for those further in either way), so a Transport
// that is the only one over its store can send the request as it is: no Transport it may
// reach, directly or through any RoundTripper between them (a retry layer, a user's wrapper),
// would read the mark.
//
// The Transports over a store are counted in the store value itself (cache.Sharing, from
// cache.Traits), never in a process-wide registry. A Transport joins at the end of New and
// leaves when it is garbage collected (runtime.AddCleanup), not at Close: a closed Transport
// over a store it did not make still counts its requests there. The one gap: a Transport over
// the same store made while requests are in flight and put, by a RoundTripper whose next hop
// changes at run time, in the way of those requests: they were not marked, and are counted
// again in the counters both keep. That is an over-count of those few requests, never an
// under-count. A Transport that is reached again by its own attempt (its base calls back into
// it) counts it again too. So does one over another store value that reaches the same data
// (two Redis stores over one server and prefix): it is another store here, and does not read
// the outer one's marks.
//
// A store without a Sharing (one that does not implement cache.Describer) has no count: a
// Transport over it marks every attempt (share.alwaysMark) when the store can be compared, since
// another Transport may be over it, and never when it cannot (no other Transport could tell
// that the store is its own). Marking is safe either way, only slower.

// traitsOf returns what st says of itself (cache.Describer), or the zero Traits.
func traitsOf(st cache.Store) cache.Traits {
	if d, ok := st.(cache.Describer); ok {
		return d.Describe()
	}
	return cache.Traits{}
}

// joinStore sets t's share.id and counts t among the Transports over its store (sh, the
// store's Sharing, nil when it has none) until t is garbage collected. The cleanup holds the
// count only, which refers to nothing of the store's or t's, so it never keeps t alive.
func (t *Transport) joinStore(sh *cache.Sharing) {
	if sh != nil {
		t.share.id, t.share.users = sh, sh.Join()
		runtime.AddCleanup(t, (*storeshare.Users).Leave, t.share.users)
		return
	}
	// Compared by value: a struct wrapping a store is of a comparable type, yet comparing it
	// panics when the store inside cannot be compared.
	if reflect.ValueOf(t.store).Comparable() {
		t.share.id, t.share.alwaysMark = t.store, true
	}
}

// sameStore reports whether a mark made with share.id id is of t's store.
func (t *Transport) sameStore(id any) bool {
	return t.share.id != nil && id == t.share.id
}

// needsMark reports whether an attempt through t to base must carry a mark for Transports
// further in: not when base is a net/http Transport (never one of ours, and the end of the
// chain), nor when t is the only Transport over its store (see above).
func (t *Transport) needsMark(base http.RoundTripper) bool {
	if _, ok := base.(*http.Transport); ok {
		return false
	}
	return t.shared()
}

// shared reports whether another Transport may use t's store. When none does, no Transport
// further out can have marked an attempt that reaches t (a live outer Transport over t's store
// would be counted), so a mark of t's store in a request's context is stale (a context kept
// from an earlier attempt, made when the store was shared): t need not look for one, and
// counting the attempt in full is right.
func (t *Transport) shared() bool {
	return t.share.alwaysMark || (t.share.users != nil && t.share.users.Shared())
}

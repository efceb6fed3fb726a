package ratemonitor

import (
	"context"
	"net/http"

	"github.com/ratemonitor/ratemonitor/cache"
)

// Stacked Transports (one the base of another) over one store share a key's in-flight slots:
// a request holds one slot of its key there, not one per layer, else two layers with
// WithInFlight(5) would let only 2 or 3 requests go. The outer layer passes the slots it holds
// to its base in the request's context; an inner layer over the same store (cache.SameStore)
// skips the slots of those keys. Not through an *http.Transport, which is never a Transport,
// nor when no other Transport of the process uses the store (storeuse.go).

type inflightMarkKey struct{}

// inflightMark is one slot held further out: its store and key, and the marks outside it.
type inflightMark struct {
	store  cache.Store
	key    string
	parent *inflightMark
}

// heldOutside reports whether a Transport further out holds a slot of key on store.
func heldOutside(ctx context.Context, store cache.Store, key string) bool {
	m, _ := ctx.Value(inflightMarkKey{}).(*inflightMark)
	for ; m != nil; m = m.parent {
		if m.key == key && cache.SameStore(m.store, store) {
			return true
		}
	}
	return false
}

// markHeld returns req with h's slots marked in its context for the Transports base may hold,
// or req itself when there is nothing to mark, or no Transport further in could read the mark
// (needsMark: heldOutside, too, reads only marks of its own store).
func (h *held) markHeld(base http.RoundTripper, req *http.Request) *http.Request {
	if len(h.slots) == 0 || !h.f.t.needsMark(base) {
		return req
	}
	ctx := req.Context()
	m, _ := ctx.Value(inflightMarkKey{}).(*inflightMark)
	for _, s := range h.slots {
		m = &inflightMark{store: h.f.t.store, key: s.key, parent: m}
	}
	return req.WithContext(context.WithValue(ctx, inflightMarkKey{}, m))
}

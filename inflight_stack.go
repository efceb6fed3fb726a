package ratemonitor

import (
	"context"
	"net/http"
	"sync/atomic"
)

// Stacked Transports (one the base of another) over one store share a key's in-flight slots:
// a request holds one slot of its key there, not one per layer, else two layers with
// WithInFlight(5) would let only 2 or 3 requests go. The outer layer passes the slots it holds
// to its base in the request's context; an inner layer over the same store (the same share.id)
// skips the slots of those keys. Not through an *http.Transport, which is never a Transport,
// nor when no other Transport uses the store (storeuse.go).

type inflightMarkKey struct{}

// inflightMark is the slots one Transport's call holds: its store and keys (the request's key,
// the app key), and the marks outside it. Like a countMark (counted.go), it is valid only while
// that call to its base runs (done): it outlives the call in the context of the response's
// Request, and a request built on that context would otherwise skip its slot and go over the
// in-flight limit. A request that reaches a Transport inside after the call returned (a hedge
// left running) is another request in flight, and takes its own slot.
type inflightMark struct {
	store  any // the marking Transport's share.id
	keys   [2]string
	n      int // keys in use
	parent *inflightMark
	done   atomic.Bool
}

// live returns m or the first mark outside it whose call is still running (nil: none).
func (m *inflightMark) live() *inflightMark {
	for m != nil && m.done.Load() {
		m = m.parent
	}
	return m
}

// heldOutside reports whether a Transport further out holds a slot of key on t's store, in a
// call still running.
func heldOutside(ctx context.Context, t *Transport, key string) bool {
	m, _ := ctx.Value(inflightMarkKey{}).(*inflightMark)
	for m = m.live(); m != nil; m = m.parent.live() {
		for _, k := range m.keys[:m.n] {
			if k == key && t.sameStore(m.store) {
				return true
			}
		}
	}
	return false
}

// markHeld returns req with h's slots marked in its context for the Transports base may hold,
// and the mark, for the caller to void (done) when its call to base returns; or req itself and
// nil when there is nothing to mark, or no Transport further in could read the mark
// (needsMark: heldOutside, too, reads only marks of its own store).
func (h *held) markHeld(base http.RoundTripper, req *http.Request) (*http.Request, *inflightMark) {
	if len(h.slots) == 0 || !h.f.t.needsMark(base) {
		return req, nil
	}
	ctx := req.Context()
	parent, _ := ctx.Value(inflightMarkKey{}).(*inflightMark)
	m := &inflightMark{store: h.f.t.share.id, parent: parent.live()}
	for _, s := range h.slots { // the key's and the in-flight meters' (take)
		m.keys[m.n] = s.key
		m.n++
	}
	return req.WithContext(context.WithValue(ctx, inflightMarkKey{}, m)), m
}

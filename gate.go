package ratemonitor

import (
	"context"
	"hash/maphash"
	"net/http"
	"sync"
	"sync/atomic"
)

// firstGate holds back a paced, synced Transport's requests on a key whose state is unknown
// (no answer read for it in this process, nothing in the store) until the first answer is
// read: a token that has 50 left must not see 50 sent on a guess of a full allowance. See
// docs/pacing.md#the-first-answer-before-the-rush.
//
// It is per request key: a reader's remaining counts are the key's. Meter keys are not gated.
type firstGate struct {
	n      int // requests let out on an unknown key before its first answer
	seed   maphash.Seed
	shards [32]gateShard
}

// gateShard holds the known keys in a map that is replaced, never written, so that a known
// key is looked up with an atomic load and no lock (no cache line written per request). Keys
// known since it was last replaced wait in recent, under mu, until they are a quarter of it
// (a map of under 4 keys is replaced at once); then it is replaced by a copy holding them too
// (a copy per key would cost each new key the time to copy all the others). The keys not
// known yet are in keys, under mu.
type gateShard struct {
	known   atomic.Pointer[map[string]struct{}]
	nrecent atomic.Int32 // len(recent)
	mu      sync.Mutex
	recent  map[string]struct{}
	keys    map[string]*gateKey
}

// gateKey is an unknown key's gate: out probes in flight, and wake, closed when one leaves.
type gateKey struct {
	out     int
	waiting int // requests waiting (for tests)
	wake    chan struct{}
}

// newFirstGate returns the gate of a Transport with cfg, or nil when there is none to keep:
// monitoring mode never holds a request back (it only counts what is sent), nothing can tell
// a key's remaining without a reader (SyncConfig.Readers, or WithCostReport's), and a negative
// SyncConfig.FirstAnswer turns it off.
func newFirstGate(paced bool, cfg *SyncConfig, report bool) *firstGate {
	n := cfg.firstAnswer(paced)
	if n == 0 || (len(cfg.Readers) == 0 && !report) {
		return nil
	}
	g := &firstGate{n: n, seed: maphash.MakeSeed()}
	for i := range g.shards {
		g.shards[i].known.Store(&map[string]struct{}{})
	}
	return g
}

// defaultFirstAnswer is SyncConfig.FirstAnswer's default.
const defaultFirstAnswer = 1

// firstAnswer is how many requests of an unknown key go before its first answer under cfg;
// 0: none are held (monitoring mode never holds a request, a negative FirstAnswer turns the
// gate off, and nil is no WithSync).
func (cfg *SyncConfig) firstAnswer(paced bool) int {
	if !paced || cfg == nil || cfg.FirstAnswer < 0 {
		return 0
	}
	return max(cfg.FirstAnswer, defaultFirstAnswer)
}

// isKnown reports whether key is known: an answer was read for it, or the store held state.
func (sh *gateShard) isKnown(key string) bool {
	if sh.merged(key) {
		return true
	}
	if sh.nrecent.Load() == 0 {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.recent[key]
	return ok
}

// knownLocked is isKnown with sh.mu held.
func (sh *gateShard) knownLocked(key string) bool {
	_, ok := sh.recent[key]
	return ok || sh.merged(key)
}

// merged reports whether key is in the shard's map of known keys (not its recent ones).
func (sh *gateShard) merged(key string) bool {
	m := sh.known.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[key]
	return ok
}

func (g *firstGate) shard(key string) *gateShard {
	return &g.shards[maphash.String(g.seed, key)%uint64(len(g.shards))]
}

// gateEnter lets req on key through the gate. It returns probe set when req is one of the
// requests sent before key's first answer (gateLeave must follow, with what came back), and
// ctx's error when ctx ends first (nothing was sent). A known key costs an atomic load and a
// map lookup (and a lock while among its shard's recent keys).
func (t *Transport) gateEnter(ctx context.Context, key string) (probe bool, err error) {
	sh := t.pace.gate.shard(key)
	if sh.isKnown(key) {
		return false, nil
	}
	return t.gateWait(ctx, sh, key)
}

// gateWait is gateEnter for a key not known yet: the first arrival asks the store whether
// another Transport has counted on the key; the others wait for a free probe or the answer.
func (t *Transport) gateWait(ctx context.Context, sh *gateShard, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sh.mu.Lock()
	k := sh.keys[key]
	if k == nil && !sh.knownLocked(key) {
		if sh.keys == nil {
			sh.keys = map[string]*gateKey{}
		}
		k = &gateKey{out: 1, wake: make(chan struct{})}
		sh.keys[key] = k
		sh.mu.Unlock()
		if t.storeKnows(ctx, key) {
			t.gateLeave(key, true)
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			t.gateLeave(key, false)
			return false, err
		}
		return true, nil
	}
	for {
		if k == nil { // known: it opened, here or meanwhile
			sh.mu.Unlock()
			return false, nil
		}
		if k.out < t.pace.gate.n {
			k.out++
			sh.mu.Unlock()
			return true, nil
		}
		wake := k.wake
		k.waiting++
		sh.mu.Unlock()
		var err error
		select {
		case <-wake:
		case <-ctx.Done():
			err = ctx.Err()
		}
		sh.mu.Lock()
		k.waiting-- // the gateKey waited on, even if the key has opened since
		if err != nil {
			sh.mu.Unlock()
			return false, err
		}
		k = sh.keys[key]
	}
}

// storeKnows reports whether the store holds state for key: a count, a remaining count an
// upstream reported, or a pause. A store error is read as no state: a probe goes.
func (t *Transport) storeKnows(ctx context.Context, key string) bool {
	snap, err := t.ops.Peek(ctx, t.strat, key, 0)
	if err != nil {
		return false
	}
	if !snap.PausedUntil.IsZero() {
		return true
	}
	for _, u := range snap.Usage {
		if u.Used > 0 || !u.ReportedAt.IsZero() {
			return true
		}
	}
	return false
}

// gateLeave ends a probe on key: answered opens the gate for good; otherwise (nothing sent,
// a transport error, a 5xx) the probe's place goes to one of the waiters.
func (t *Transport) gateLeave(key string, answered bool) {
	sh := t.pace.gate.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k == nil {
		return
	}
	close(k.wake)
	if answered {
		delete(sh.keys, key)
		if sh.recent == nil {
			sh.recent = map[string]struct{}{}
		}
		sh.recent[key] = struct{}{}
		old := sh.known.Load()
		if len(sh.recent) < len(*old)/4 {
			sh.nrecent.Store(int32(len(sh.recent)))
			return
		}
		m := make(map[string]struct{}, len(sh.recent)+len(*old))
		for x := range *old {
			m[x] = struct{}{}
		}
		for x := range sh.recent {
			m[x] = struct{}{}
		}
		sh.known.Store(&m)
		clear(sh.recent)
		sh.nrecent.Store(0)
		return
	}
	k.out--
	k.wake = make(chan struct{})
}

// answered reports whether a probe's outcome is an answer about the key's limits: any response
// but a server error (5xx), which is read as a failure even when it carries figures (a 503 that
// paused the key is an answer: roundTripGated looks).
func answered(resp *http.Response, err error) bool {
	return err == nil && resp != nil && resp.StatusCode < http.StatusInternalServerError
}

// roundTripGated is RoundTrip through the gate (t.pace.gate set).
func (t *Transport) roundTripGated(base http.RoundTripper, req *http.Request, key string) (*http.Response, error) {
	probe, err := t.gateEnter(req.Context(), key)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if !probe {
		return t.roundTripAfterGate(base, req, key)
	}
	left := false
	defer func() {
		if !left { // base panicked: the probe's place goes to a waiter
			t.gateLeave(key, false)
		}
	}()
	resp, err := t.roundTripAfterGate(base, req, key)
	ok := answered(resp, err)
	if !ok && err == nil && resp != nil && resp.Header.Get("Retry-After") != "" {
		// A 503 with Retry-After may have paused the key: then the others wait the pause.
		snap, perr := t.ops.Peek(context.WithoutCancel(req.Context()), t.strat, key, 0)
		ok = perr == nil && !snap.PausedUntil.IsZero()
	}
	left = true
	t.gateLeave(key, ok)
	return resp, err
}

// roundTripAfterGate is the rest of RoundTrip.
func (t *Transport) roundTripAfterGate(base http.RoundTripper, req *http.Request, key string) (*http.Response, error) {
	if t.inflight != nil {
		return t.roundTripInFlight(base, req, key)
	}
	return t.roundTrip(base, req, key)
}

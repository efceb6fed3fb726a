package degradetest

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The real-clock tests of a paced fleet judge each rule at the instants the grants were made
// (what the rule is enforced at), not at the sends: on a loaded machine a request may be sent
// long after its grant. A grant of the shared store has its instant (Redis TIME, noted by
// grantLog); a grant of a Transport's degraded mode is not visible from outside, so it is
// known to lie in a span: from the request's start or its last wake from a pacing sleep (a
// Transport sends a slot as soon as it is granted, so no grant the request is sent on came
// before), to its send. A window is judged by the grants certain to lie in it (mostIn): on an
// idle machine the spans are short, and a loaded one can make a grant's span longer, never
// make a window seem fuller than it was.

// span is the interval the instant of one grant lies in; lo == hi when the instant is known.
// local: the grant was the degraded mode's.
type span struct {
	lo, hi time.Time
	local  bool
}

// exact returns the spans of grants whose instants are known.
func exact(ats ...time.Time) []span {
	out := make([]span, len(ats))
	for i, at := range ats {
		out[i] = span{lo: at, hi: at}
	}
	return out
}

// grantSlot rides in a request's context: grantLog notes there the Redis instant of the
// grant the request may be sent on, wakeClock when the request last woke from a pacing sleep.
type grantSlot struct {
	mu    sync.Mutex
	at    time.Time // the shared store's grant since the last wake; zero when none
	after time.Time // the request's start, or its last wake
}

type grantSlotKey struct{}

// withGrantSlot returns ctx with an empty grantSlot for one request, starting now.
func withGrantSlot(ctx context.Context) context.Context {
	return context.WithValue(ctx, grantSlotKey{}, &grantSlot{after: time.Now()})
}

func slotOf(ctx context.Context) *grantSlot {
	s, _ := ctx.Value(grantSlotKey{}).(*grantSlot)
	return s
}

// grantedIn is the span of the grant req is sent on, for a base RoundTripper to note: the
// Redis instant grantLog noted, when the shared store made it since the request last woke,
// else from the start or wake to now (the degraded mode granted it, on this machine's clock,
// which Redis shares). A Redis grant followed by a sleep is not the one sent on: a Transport
// that meets a new Sentinel master does not use its grant and waits out the hold-back.
func grantedIn(req *http.Request) span {
	now := time.Now()
	slot := slotOf(req.Context())
	if slot == nil {
		return span{hi: now} // neither known: certain in no window
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if !slot.at.IsZero() {
		return span{lo: slot.at, hi: slot.at}
	}
	return span{lo: slot.after, hi: now, local: true}
}

// wakeClock is the real clock of a Transport whose requests carry grantSlots: each pacing
// sleep notes its end in the request's slot.
type wakeClock struct{}

func (wakeClock) Now() time.Time { return clock.Real().Now() }

func (wakeClock) Sleep(ctx context.Context, d time.Duration) error {
	err := clock.Real().Sleep(ctx, d)
	if slot := slotOf(ctx); slot != nil {
		slot.mu.Lock()
		slot.at, slot.after = time.Time{}, time.Now()
		slot.mu.Unlock()
	}
	return err
}

// grantLog is a real Redis store that notes each grant it makes in the request's grantSlot,
// and forgets it when it is given back (the degraded mode's probe reserves a slot and releases
// it at once). With n > 0 it says the fleet has n processes (as fleetStore), else what the
// store's heartbeat counts.
type grantLog struct {
	*redisstore.Store
	n int
}

func (g grantLog) Processes() int {
	if g.n > 0 {
		return g.n
	}
	return g.Store.Processes()
}

// Describe is the store's, but for Processes.
func (g grantLog) Describe() cache.Traits {
	tr := g.Store.Describe()
	tr.Processes = g.Processes
	return tr
}

func (g grantLog) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := g.Store.Reserve(ctx, s, key, n)
	if slot := slotOf(ctx); slot != nil && err == nil && res.Allowed {
		slot.mu.Lock()
		slot.at = res.At
		slot.mu.Unlock()
	}
	return res, err
}

func (g grantLog) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	if slot := slotOf(ctx); slot != nil {
		slot.mu.Lock()
		if slot.at.Equal(at) {
			slot.at = time.Time{}
		}
		slot.mu.Unlock()
	}
	return g.Store.Release(ctx, s, key, at, n)
}

// window is a window of grants: where it begins and how many grants are certain to lie in it.
type window struct {
	at time.Time
	n  int
}

// windowsOf returns, for each grant's lo (sorted), the window [lo, lo+w) and the grants
// certain to lie in it (lo ≥ its start, hi before its end). The windows that begin at a lo
// are enough: moving a window's start up to the first lo it holds loses no grant it holds.
func windowsOf(spans []span, w time.Duration) []window {
	sorted := slices.SortedFunc(slices.Values(spans), func(a, b span) int { return a.lo.Compare(b.lo) })
	out := make([]window, 0, len(sorted))
	for i, s := range sorted {
		n := 0
		for _, x := range sorted[i:] {
			if !x.lo.Before(s.lo.Add(w)) {
				break
			}
			if x.hi.Before(s.lo.Add(w)) {
				n++
			}
		}
		out = append(out, window{s.lo, n})
	}
	return out
}

// mostIn returns the most grants of spans certain to lie in one window of length w, and where
// the first such window begins.
func mostIn(spans []span, w time.Duration) (most int, at time.Time) {
	for _, x := range windowsOf(spans, w) {
		if x.n > most {
			most, at = x.n, x.at
		}
	}
	return most, at
}

// overIn returns every window of length w, beginning at a grant's lo, that holds more than
// limit grants certain to lie in it.
func overIn(spans []span, w time.Duration, limit int) []window {
	var out []window
	for _, x := range windowsOf(spans, w) {
		if x.n > limit {
			out = append(out, x)
		}
	}
	return out
}

// countIn returns how many grants of spans are certain to lie in [from, to).
func countIn(spans []span, from, to time.Time) int {
	n := 0
	for _, x := range spans {
		if !x.lo.Before(from) && x.hi.Before(to) {
			n++
		}
	}
	return n
}

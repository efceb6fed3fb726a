package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/internal/credential"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// WithCost makes each request count as f(req) requests instead of one: the points a GraphQL
// query costs (GitHub, Shopify), or the weight of an endpoint. The cost is charged before the
// send, in both modes: reserved as one burst of that many under pacing (waiting until all of
// it fits every rule), recorded as that many in monitoring mode. With WithCostReport the charge
// is corrected after the response to what the upstream says the request cost.
//
// A cost below 1, or above what a rule allows per window (its Limit − Headroom, the largest
// burst that can ever fit, on the request's key or a meter's that charges its cost), is an error RoundTrip
// returns at once, sending and recording nothing; it names the cost and the rule, and wraps
// strategy.ErrInvalidBurst or strategy.ErrBurstTooLarge; so is a panic of f (recovered, and
// named in the error). f must be safe for concurrent use, and must not read the request body
// (the transport would send it consumed). A request that spends
// a Reservation's slot (Reservation.Context) spends one slot whatever its cost: reserve its
// cost with Reserve (WithCostReport records a higher real cost on top). Without WithCost every request costs 1.
func WithCost(f func(*http.Request) int) Option {
	return func(t *Transport) error {
		if f == nil {
			return errors.New("ratemonitor: WithCost(nil)")
		}
		t.costs.fn = f
		return nil
	}
}

// WithCostReport makes the Transport read, from each response to a request it charged, what the
// upstream says the request cost (a cost.Reader, such as cost.ShopifyGraphQL or
// cost.GitHubGraphQL), and correct the charge: a higher cost is recorded on top, a lower one
// given back under pacing (never in monitoring mode, nor for a Reservation's slot). A response
// that does not say (cost.Unknown) leaves the charge as it was, and so does a cost above a
// rule's Limit − Headroom, which goes to the error handler and the logger, as store errors do.
// A cost.BodyReader corrects the charge once the caller has read the body to its end, or closed
// it after one whole JSON value. With WithSync, the points the reader says remain update the
// rules. A report's Meters correct the request's charge on each meter it names, and their
// figures update those meters (LLM tokens: docs/llm.md). Without rules, the figures give the
// limits of the meters WithMeter gave without rules (docs/learning.md). New fails when a cost.Declared reader
// names a window no rule has. r must be safe for concurrent use. See
// docs/cost.md#charge-then-correct and
// docs/cost.md#reading-the-cost-from-the-body.
func WithCostReport(r cost.Reader) Option {
	return func(t *Transport) error {
		if r == nil || isNilPointer(r) || isNilFunc(r) {
			return errors.New("ratemonitor: WithCostReport(nil)")
		}
		t.costs.report = r
		return nil
	}
}

// charge is what one attempt was charged here: n on the counters of lim, reserved at instant at
// on the request's key and at each meter charge's own (the store's instants, for its Release;
// zero when recorded, in monitoring mode), at local on the Transport's clock (for owedBack: the
// store's clock may differ from ours), while the degraded mode's generation was gen.
type charge struct {
	n     int
	lim   limits
	at    time.Time
	local time.Time
	gen   uint64
}

// requestCost returns the cost of req on key (WithCost's), and lim with each meter's charge set
// to the request's cost on it (Meter.Cost's, or the same) and the meters that do not apply
// (cost 0) left out; or the error RoundTrip returns for a cost that can never fit, or for a cost
// function that panicked. RoundTrip calls it only without t.costs.unit.
func (t *Transport) requestCost(req *http.Request, key string, lim limits) (int, limits, error) {
	n := 1
	if t.costs.fn != nil {
		var err error
		if n, err = callCost("WithCost", "", t.costs.fn, req); err != nil {
			return 0, lim, err
		}
	}
	if lim.strat != nil {
		if err := lim.strat.CheckBurst(n); err != nil {
			return 0, lim, fmt.Errorf("ratemonitor: WithCost: not sent: request cost %d on key %q: %w", n, key, err)
		}
	}
	// Filtered in place: lim.meters is this request's own (costing.fixed, shared by every
	// request, is set only when every cost is 1, and then requestCost is not called).
	left := lim.meters[:0]
	for _, c := range lim.meters {
		c.n = n
		if c.m.cost != nil {
			var err error
			if c.n, err = callCost("meter", c.m.name, c.m.cost, req); err != nil {
				return 0, lim, err
			}
			if c.n == 0 {
				continue // the meter does not apply to req
			}
		}
		if err := c.strat.CheckBurst(c.n); err != nil {
			return 0, lim, fmt.Errorf("ratemonitor: not sent: request cost %d on meter %q, key %q: %w", c.n, c.m.name, c.key, err)
		}
		left = append(left, c)
	}
	lim.meters = left
	return n, lim, nil
}

// callCost returns f(req), or an error saying that f (of kind, such as "meter", named name)
// panicked.
func callCost(kind, name string, f func(*http.Request) int, req *http.Request) (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			what := kind
			if name != "" {
				what = fmt.Sprintf("%s %q", kind, name)
			}
			n, err = 0, fmt.Errorf("ratemonitor: %s: not sent: the cost function panicked on %s %s: %v", what, req.Method, credential.URL(req.URL), p)
		}
	}()
	return f(req), nil
}

// costed reads resp's cost and corrects the charge ch (when the attempt was charged here), and
// returns what the header said (figures, a pause), for WithSync. A cost.BodyReader's body is
// not read here: resp's body is watched, and the charge corrected (and what it says learnt)
// once the caller has read it to its end.
func (t *Transport) costed(req *http.Request, key string, resp *http.Response, ch *charge) cost.Report {
	br, ok := t.costs.report.(cost.BodyReader)
	if !ok {
		rep := t.costs.report.ReadCost(resp, t.headerNow(t.clock.Now()))
		t.corrected(req, key, ch, rep.Cost)
		t.meterReports(req, key, ch, rep.Meters)
		return rep
	}
	rep := br.ReadHead(resp, t.headerNow(t.clock.Now()))
	t.corrected(req, key, ch, rep.Cost)
	t.meterReports(req, key, ch, rep.Meters)
	if rep.Cost == cost.Unknown && cost.Wants(resp) && (ch != nil || t.sync != nil) {
		cost.Watch(resp, func(b cost.Body) {
			body := br.ReadBody(resp, b, t.headerNow(t.clock.Now()))
			t.corrected(req, key, ch, body.Cost)
			t.meterReports(req, key, ch, body.Meters)
			if t.sync != nil && (len(body.Signals) > 0 || body.Pause > 0) {
				t.learnSignals(req, key, body)
			}
		})
	}
	return rep
}

// corrected moves the charge ch (nil: not charged here) to real, when real is known and
// differs. A real cost no rule could ever allow (above a rule's Limit − Headroom: a garbled
// body, another server's figure) is not believed: it is reported as a sync error and the
// charge stands, so that one answer cannot stop the key for longer than its longest window.
func (t *Transport) corrected(req *http.Request, key string, ch *charge, real int) {
	if ch == nil || real < 0 || real == ch.n {
		return
	}
	for _, s := range ch.corrects() {
		if err := s.CheckBurst(max(real, 1)); err != nil {
			t.syncFailed(req, key, fmt.Errorf("ratemonitor: WithCostReport: the upstream says the request cost %d, more than a rule allows per window; the charge of %d stands: %w", real, ch.n, err))
			return
		}
	}
	t.correct(req, key, ch, real)
}

// corrects returns the strategies a correction of ch's cost applies to: the key's, and those
// of the meters that charge the request's own cost (no Meter.Cost).
func (ch *charge) corrects() []*engine.Strategy {
	var ss []*engine.Strategy
	if ch.lim.strat != nil {
		ss = append(ss, ch.lim.strat)
	}
	for _, c := range ch.lim.meters {
		if c.m.cost == nil {
			ss = append(ss, c.strat)
		}
	}
	return ss
}

// learnSignals applies what a response's body said, read after RoundTrip returned (a
// cost.BodyReader's), as learn applies the header's: each figure to the rule of its window, a
// remaining of 0 pausing the key until its reset, and rep.Pause pausing the key.
func (t *Transport) learnSignals(req *http.Request, key string, rep cost.Report) {
	var keyUp, appUp engine.Update
	app := t.appMeter()
	keyUp.Pause = min(max(0, rep.Pause), t.sync.MaxPause)
	for _, sig := range rep.Signals {
		up, s := &keyUp, t.strat
		if sig.App {
			if app == nil {
				continue
			}
			up, s = &appUp, app.strat
		}
		up.Reports = t.addReport(up.Reports, s, sig)
		if sig.Remaining == 0 && sig.Reset > 0 {
			up.Pause = max(up.Pause, min(sig.Reset, t.sync.MaxPause))
		}
	}
	syncer := t.store.(cache.Syncer)
	ctx := context.WithoutCancel(req.Context())
	if keyUp.Pause > 0 || len(keyUp.Reports) > 0 {
		if err := syncer.Sync(ctx, t.strat, key, keyUp); err != nil {
			t.syncFailed(req, key, err)
		}
	}
	if app != nil && (appUp.Pause > 0 || len(appUp.Reports) > 0) {
		if err := syncer.Sync(ctx, app.strat, app.key, appUp); err != nil {
			t.syncFailed(req, app.key, err)
		}
	}
}

// correct moves the charge ch of req on key to real.
func (t *Transport) correct(req *http.Request, key string, ch *charge, real int) {
	ctx := context.WithoutCancel(req.Context()) // the response has arrived: keep what it said
	if real > ch.n {
		extra := min(real-ch.n, storecheck.MaxCount)
		for _, c := range ch.lim.meters {
			if c.m.cost == nil {
				if err := t.recordOn(ctx, c.strat, c.key, extra); err != nil {
					t.syncFailed(req, c.key, err)
				}
			}
		}
		if ch.lim.strat != nil {
			if err := t.recordOn(ctx, ch.lim.strat, key, extra); err != nil {
				t.syncFailed(req, key, err)
			}
		}
		return
	}
	back := ch.n - real
	now := t.clock.Now()
	if ch.lim.strat != nil && !ch.at.IsZero() {
		if k := owedBack(ch.lim.strat, ch.local, now, back); k > 0 {
			if err := t.releaseIn(ctx, ch.gen, ch.lim.strat, key, ch.at, k); err != nil {
				t.syncFailed(req, key, err)
			}
		}
	}
	for _, c := range ch.lim.meters {
		if c.m.cost != nil || c.at.IsZero() {
			continue
		}
		if k := owedBack(c.strat, ch.local, now, back); k > 0 {
			if err := t.releaseIn(ctx, ch.gen, c.strat, c.key, c.at, k); err != nil {
				t.syncFailed(req, c.key, err)
			}
		}
	}
}

// owedBack returns how many of back tokens, given back for a charge reserved at at, s may
// still owe at now; at and now are both the Transport's clock (charge.local), never the
// store's (a Redis server's TIME ahead of this host's clock would make the elapsed time
// negative). A rolling or fixed window removes the charge's own slots at at: all of
// back. A token bucket does not know which of its tokens were the charge's: the refill since
// at pays the oldest debt first, and may have paid the tokens given back already (a bucket full
// again since at owes none of them); giving them back then would let the bucket hold tokens
// the upstream's does not. So it is back less the tokens each bucket refilled since at
// (rounded up), at least 0: an over-count at worst, never an under-count. Computed here, at
// the instant of the correction, so that every store gives back the same. No time elapsed
// (e == 0) owes all of back; a clock that went back since at (e < 0: the refill since is
// unknown) owes none, an over-count rather than tokens the upstream's bucket may not hold.
func owedBack(s *engine.Strategy, at, now time.Time, back int) int {
	if s.Name() != "tokenbucket" {
		return back
	}
	if at.IsZero() {
		return 0 // no instant of the charge on our clock: nothing known, nothing given back
	}
	e := now.Sub(at)
	if e < 0 {
		return 0
	}
	if e == 0 {
		return back
	}
	for i := range s.NumRules() {
		r := s.Rule(i)
		w := r.EffectiveWindow()
		if e >= w {
			return 0 // refilled to full since: nothing owed
		}
		// e < w and Limit × w ≤ 2^62 (the token bucket's bound), so e × Limit fits
		refill := (int64(e)*int64(r.Limit) + int64(w) - 1) / int64(w)
		back = int(max(0, int64(back)-refill))
	}
	return back
}

// kept returns the charge c for the send, which keeps it past the response only with
// WithCostReport: a copy on the heap then, else nil (c stays on the caller's stack).
func (t *Transport) kept(c *charge) *charge {
	if t.costs.report == nil {
		return nil
	}
	k := *c
	return &k
}

// slotCharge is the charge of a request sent on a Reservation's slot, for WithCostReport: one,
// on the counters left to count (lim), at no instant (so never given back).
func (t *Transport) slotCharge(lim limits) *charge {
	if t.costs.report == nil {
		return nil
	}
	return &charge{n: 1, lim: lim, gen: t.gen()}
}

// outerCharge is the charge a Transport wrapping this one over the same store made for an
// attempt it counted in all of this one's counters (its mark m), for WithCostReport: its cost,
// on this one's counters, at no instant (the give-back needs the instant the outer reserved
// at: a lower real cost is not given back, an over-count). nil when the outer did not charge,
// or corrects its charge itself (WithCostReport there too: correcting here as well would count
// the extra twice).
func (t *Transport) outerCharge(m *countMark, key string) *charge {
	if t.costs.report == nil || m == nil || m.cost < 1 || m.corrects {
		return nil
	}
	return &charge{n: m.cost, lim: t.allLimits(key), gen: t.gen()}
}

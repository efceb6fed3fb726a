package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
)

// WithCost makes each request count as f(req) requests instead of one: the points a GraphQL
// query costs (GitHub, Shopify), or the weight of an endpoint. The cost is charged before the
// send, in both modes: reserved as one burst of that many under pacing (waiting until all of
// it fits every rule), recorded as that many in monitoring mode. With WithCostReport the charge
// is corrected after the response to what the upstream says the request cost.
//
// A cost below 1, or above what a rule allows per window (its Limit − Headroom, the largest
// burst that can ever fit, on the request's key or the app key), is an error RoundTrip
// returns at once, sending and recording nothing; it names the cost and the rule, and wraps
// strategy.ErrInvalidBurst or strategy.ErrBurstTooLarge. f must be safe for concurrent use, and
// must not read the request body (the transport would send it consumed). A request that spends
// a Reservation's slot (Reservation.Context) spends one slot whatever its cost: reserve its
// cost with Reserve. Without WithCost every request costs 1.
func WithCost(f func(*http.Request) int) Option {
	return func(t *Transport) error {
		if f == nil {
			return errors.New("ratemonitor: WithCost(nil)")
		}
		t.cost = f
		return nil
	}
}

// WithCostReport makes the Transport read, from every response to a request it charged, what
// the upstream says the request really cost (package cost: cost.ShopifyGraphQL,
// cost.GitHubGraphQL), and correct the charge: a higher real cost is recorded on top (on the
// request's key and on the app key, the counters the request was charged in), and a lower one
// is given back (the store's Release at the instant the charge was reserved, so the slots given
// back are the request's own). A response that does not say (cost.Unknown) leaves the charge as
// it was.
//
// In monitoring mode a lower cost is not given back: the store does not say at which instant it
// recorded the charge, and a Release elsewhere could free other requests' slots early; the
// excess counts until it expires (an over-count, never an under-count). Neither is a charge
// given back after the Transport switched stores (ErrorPolicy Degrade) since it was made.
//
// The remaining points the reader gives (cost.Report.Signals) go, with WithSync, to the rule
// whose window they name, as the header readers' figures do. A reader that declares its windows
// (cost.Declared) must name windows the rules have: New fails otherwise, naming the window and
// the rules. A store error while correcting does not fail the response: it goes to the error
// handler and the logger, as WithSync's do. r must be safe for concurrent use.
func WithCostReport(r cost.Reader) Option {
	return func(t *Transport) error {
		if r == nil || isNilPointer(r) || isNilFunc(r) {
			return errors.New("ratemonitor: WithCostReport(nil)")
		}
		t.costReport = r
		return nil
	}
}

// charge is what one attempt was charged here: n on the counters of lim, reserved at instant at
// on the request's key and appAt on the app key (zero when recorded, in monitoring mode), while
// the degraded mode's generation was gen.
type charge struct {
	n         int
	lim       limits
	at, appAt time.Time
	gen       uint64
}

// requestCost returns the cost of req (1 without WithCost), or the error RoundTrip returns for a
// cost that can never fit lim.
func (t *Transport) requestCost(req *http.Request, key string, lim limits) (int, error) {
	if t.cost == nil {
		return 1, nil
	}
	n := t.cost(req)
	if lim.strat != nil {
		if err := lim.strat.CheckBurst(n); err != nil {
			return 0, fmt.Errorf("ratemonitor: WithCost: not sent: request cost %d on key %q: %w", n, key, err)
		}
	}
	if lim.app != nil {
		if err := lim.app.strat.CheckBurst(n); err != nil {
			return 0, fmt.Errorf("ratemonitor: WithCost: not sent: request cost %d on the app key %q: %w", n, lim.app.key, err)
		}
	}
	return n, nil
}

// costed reads resp's cost, corrects the charge ch (when the attempt was charged here), and
// returns the figures the reader gave, for WithSync.
func (t *Transport) costed(req *http.Request, key string, resp *http.Response, ch *charge) []headers.Signal {
	rep := t.costReport.ReadCost(resp, t.headerNow(t.clock.Now()))
	if ch != nil && rep.Cost >= 0 && rep.Cost != ch.n {
		t.correct(req, key, ch, rep.Cost)
	}
	return rep.Signals
}

// correct moves the charge ch of req on key to real.
func (t *Transport) correct(req *http.Request, key string, ch *charge, real int) {
	ctx := context.WithoutCancel(req.Context()) // the response has arrived: keep what it said
	if real > ch.n {
		extra := min(real-ch.n, cache.MaxCount)
		if ch.lim.app != nil {
			if err := t.recordOn(ctx, ch.lim.app.strat, ch.lim.app.key, extra); err != nil {
				t.syncFailed(req, ch.lim.app.key, err)
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
	if ch.lim.strat != nil && !ch.at.IsZero() {
		if err := t.releaseIn(ctx, ch.gen, ch.lim.strat, key, ch.at, back); err != nil {
			t.syncFailed(req, key, err)
		}
	}
	if ch.lim.app != nil && !ch.appAt.IsZero() {
		if err := t.releaseIn(ctx, ch.gen, ch.lim.app.strat, ch.lim.app.key, ch.appAt, back); err != nil {
			t.syncFailed(req, ch.lim.app.key, err)
		}
	}
}

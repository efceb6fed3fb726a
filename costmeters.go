package ratemonitor

import (
	"context"
	"fmt"
	"net/http"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// meterReports applies what a response to req (on key) said about the meters
// (cost.Report.Meters): each known cost moves the request's charge on that meter (ch; nil: the
// attempt was not charged here, and nothing is moved) from what it was charged before the send,
// and with WithSync each meter's figures and pause are kept on its key. A name no meter with
// rules has is ignored: a reader may know of meters a Transport was built without.
func (t *Transport) meterReports(req *http.Request, key string, ch *charge, reps map[string]cost.Report) {
	for name, rep := range reps {
		m := t.meterNamed(name)
		if m == nil {
			continue
		}
		mk := m.keyFor(key)
		if mk == "" {
			continue // RoundTrip refused such a key before the send
		}
		if ch != nil && rep.Cost >= 0 {
			t.meterCorrected(req, ch, m, mk, rep.Cost)
		}
		if t.sync != nil {
			t.meterLearned(req, m, mk, rep)
		}
	}
}

// meterCorrected moves the charge of ch on m (on m's key mk) to real: the extra is recorded,
// what was charged above it given back under pacing (as correct does for the request's own
// cost). A meter that did not charge the request (its Cost was 0) is charged real. A real cost
// no rule of m could ever allow is not believed: reported as a sync error, the charge stands.
func (t *Transport) meterCorrected(req *http.Request, ch *charge, m *meter, mk string, real int) {
	c := meterCharge{m: m, strat: m.strat, key: mk}
	for _, mc := range ch.lim.meters {
		if mc.m == m {
			c = mc
		}
	}
	if real == c.n || c.strat == nil {
		return
	}
	if err := c.strat.CheckBurst(max(real, 1)); err != nil {
		t.syncFailed(req, mk, fmt.Errorf("ratemonitor: WithCostReport: the upstream says the request cost %d on meter %q, more than a rule allows per window; the charge of %d stands: %w", real, m.name, c.n, err))
		return
	}
	ctx := context.WithoutCancel(req.Context()) // the response has arrived: keep what it said
	if real > c.n {
		if err := t.recordOn(ctx, c.strat, c.key, min(real-c.n, storecheck.MaxCount)); err != nil {
			t.syncFailed(req, c.key, err)
		}
		return
	}
	if c.at.IsZero() {
		return // recorded, not reserved (monitoring mode): nothing is given back
	}
	if k := owedBack(c.strat, ch.local, t.clock.Now(), c.n-real); k > 0 {
		if err := t.releaseIn(ctx, ch.gen, c.strat, c.key, c.at, k); err != nil {
			t.syncFailed(req, c.key, err)
		}
	}
}

// meterLearned keeps what rep says of m's rules on m's key mk: each figure on the rule of its
// window (a remaining below ours raises our usage), a remaining of 0 with a reset pausing the
// key until it, a fixed window (SyncConfig.Fixed) used up with no reset pausing it for its probe
// interval, and rep.Pause pausing it.
func (t *Transport) meterLearned(req *http.Request, m *meter, mk string, rep cost.Report) {
	var up engine.Update
	up.Pause = min(max(0, rep.Pause), t.sync.MaxPause)
	for _, sig := range rep.Signals {
		up.Reports = t.addReport(up.Reports, m.strat, sig)
		if sig.Remaining == 0 && sig.Reset > 0 {
			up.Pause = max(up.Pause, min(sig.Reset, t.sync.MaxPause))
		}
	}
	// a fixed window used up with no reset: its probe waits out the interval (SyncConfig.Fixed)
	up.Pause = max(up.Pause, min(t.probeWait(m.strat, up.Reports), t.sync.MaxPause))
	if up.Pause == 0 && len(up.Reports) == 0 {
		return
	}
	if err := t.store.(cache.Syncer).Sync(context.WithoutCancel(req.Context()), m.strat, mk, up); err != nil {
		t.syncFailed(req, mk, err)
	}
}

package ratemonitor

import (
	"net/http"
	"slices"

	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// A Transport made without rules, given WithCostReport and meters with a Cost and no rules
// (such as profiles.OpenAI(0, 0, nil)), learns those meters' limits from the report's figures:
// a figure that gives its limit and window makes the meter's rule. The report's own figures
// (cost.Report.Signals: the request's own limit) make the meter "requests", charged 1 a request.
// The report's costs correct the request's charges, as WithCostReport's do with rules.

// reportMeters returns the meters rep, the report of an answer on key, states: the first of
// each meter's figures (its own, or those of a meter WithMeter gave without rules) that gives
// a limit of at least 1 and a window a rule can have. cur are key's meters now: one with the
// same limits is kept.
func (t *Transport) reportMeters(key string, rep cost.Report, cur []*liveMeter) []learned {
	var got []learned
	add := func(name, mk string, r cost.Report) {
		i := slices.IndexFunc(r.Signals, func(s headers.Signal) bool {
			return !s.App && s.Limit >= 1 && s.Window > 0 && s.Window <= strategy.MaxWindow
		})
		if i < 0 {
			return
		}
		sig := r.Signals[i]
		rules := []strategy.Rule{{Limit: sig.Limit, Window: sig.Window}}
		m := &liveMeter{meter: meter{name: name, key: mk}, unit: unitReport, rules: rules}
		if j := slices.IndexFunc(cur, func(o *liveMeter) bool { return o.name == name }); j >= 0 && cur[j].key == mk && cur[j].same(m) {
			m = cur[j]
		} else if m = t.newLearned(name, mk, unitReport, "", rules, 0); m == nil {
			return
		}
		rem := sig.Remaining
		if rem < 0 {
			rem = headers.Unknown // a reader's garbled figure: the limit alone is kept
		}
		got = append(got, learned{m: m, remaining: rem, limit: sig.Limit, reset: sig.Reset, pause: max(r.Pause, 0)})
	}
	add(reportRequests, "", cost.Report{Signals: rep.Signals, Pause: rep.Pause})
	for _, tm := range t.sync.learn.reported {
		if r, ok := rep.Meters[tm.name]; ok {
			add(tm.name, tm.key, r)
		}
	}
	return got
}

// reportLearned reads resp, the answer to req on key, with WithCostReport's reader: the costs
// the head's report gives (a plain Reader's whole report) correct the request's charges ch
// (nil: none), and a cost.BodyReader's body, once the caller has read it, corrects them too and
// updates the usage of key's learned meters from its figures. It returns the head's report,
// whose figures learnFrom learns limits from.
func (t *Transport) reportLearned(req *http.Request, key string, lk *learnedKey, resp *http.Response, ch *charge) cost.Report {
	now := t.headerNow(t.clock.Now())
	br, ok := t.costs.report.(cost.BodyReader)
	if !ok {
		rep := t.costs.report.ReadCost(resp, now)
		t.reportCorrected(req, ch, rep.Meters)
		return rep
	}
	rep := br.ReadHead(resp, now)
	t.reportCorrected(req, ch, rep.Meters)
	if cost.Wants(resp) {
		cost.Watch(resp, func(b cost.Body) {
			body := br.ReadBody(resp, b, t.headerNow(t.clock.Now()))
			t.reportCorrected(req, ch, body.Meters)
			t.reportBody(req, key, lk, body)
		})
	}
	return rep
}

// reportCorrected moves each charge of ch to the cost reps gives for its meter, when known. A
// meter that did not charge the request is not charged here: the next answers' remaining
// counts bring it up to what the upstream counted.
func (t *Transport) reportCorrected(req *http.Request, ch *charge, reps map[string]cost.Report) {
	if ch == nil {
		return
	}
	for _, c := range ch.lim.meters {
		if r, ok := reps[c.m.name]; ok && r.Cost >= 0 {
			t.meterCorrected(req, ch, c.m, c.key, r.Cost)
		}
	}
}

// reportBody keeps what a body's report says of key's meters learned from reports: each
// figure on the meter's rule of its window, and its pause. Limits are learned from heads only.
func (t *Transport) reportBody(req *http.Request, key string, lk *learnedKey, body cost.Report) {
	l := t.sync.learn
	l.mu.Lock()
	ms := lk.meters
	l.mu.Unlock()
	for _, m := range ms {
		if m.unit != unitReport || m.strat == nil {
			continue
		}
		r := cost.Report{Signals: body.Signals, Pause: body.Pause}
		if m.name != reportRequests {
			r = body.Meters[m.name]
		}
		if mk := m.keyFor(key); mk != "" && (len(r.Signals) > 0 || r.Pause > 0) {
			t.meterLearned(req, &m.meter, mk, r)
		}
	}
}

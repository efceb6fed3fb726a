package ratemonitor

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/headerparse"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// sendLearned passes req to base and learns from the answer: the limits it states for key's
// meters, their remaining counts, and the pauses it asks for; with WithCostReport, the report
// corrects the request's charges ch (nil: none to correct) too.
func (t *Transport) sendLearned(base http.RoundTripper, req *http.Request, key string, lk *learnedKey, ch *charge) (*http.Response, error) {
	seq := lk.sent.Add(1)
	resp, err := base.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	if t.obs != nil && resp.StatusCode == http.StatusTooManyRequests {
		t.obs.Observe(observe.Event{Kind: observe.TooManyRequests, Key: key})
	}
	var rep cost.Report
	if t.costs.report != nil {
		rep = t.reportLearned(req, key, lk, resp, ch)
	}
	t.learnFrom(req, key, lk, resp, seq, rep)
	return resp, nil
}

// learned is one limit an answer states: a meter to keep, and what the answer says of it now.
type learned struct {
	m         *liveMeter
	remaining int           // headers.Unknown when the answer does not say
	limit     int           // the quota the remaining is out of
	reset     time.Duration // headers.Unknown when the answer does not say
	pause     time.Duration // a cost report's pause of the meter (cost.Report.Pause)
}

// learnFrom reads resp, the answer to req on key: each IETF policy (draft-ietf-httpapi-
// ratelimit-headers-11) with a quota becomes a meter of key, or of its partition key (pk);
// without them, X-RateLimit-Limit with a reset becomes one ("x-ratelimit"); with WithCostReport,
// rep's figures that state a limit become meters too (reportMeters). A meter whose
// limits changed is replaced, and reported, unless a request sent after req stated the limits
// it has (seq is req's number among the key's requests). Then the remaining counts raise the
// meters' usage and a used-up limit or a refusal pauses them, for every Transport over the
// store.
func (t *Transport) learnFrom(req *http.Request, key string, lk *learnedKey, resp *http.Response, seq uint64, rep cost.Report) {
	now := t.clock.Now()
	hnow := t.headerNow(now)
	l := t.sync.learn
	l.mu.Lock()
	cur := lk.meters
	l.mu.Unlock()
	var got []learned
	for _, p := range headers.ParseIETF(resp.Header) {
		if g, ok := t.ietfMeter(key, p, cur); ok {
			got = append(got, g)
		}
	}
	if len(got) == 0 {
		mode := headerparse.ResetMode(t.sync.XRateLimitReset)
		if x := headerparse.ParseXRateLimit(resp.Header, hnow, mode); x.Limit >= 1 && x.Reset > 0 {
			if g, ok := t.xrlMeter(key, x, cur); ok {
				got = append(got, g)
			}
		}
	}
	if t.costs.report != nil {
		got = append(got, t.reportMeters(key, rep, cur)...)
	}
	var changed []*liveMeter
	if len(got) > 0 {
		l.mu.Lock()
		ms := slices.Clone(lk.meters)
		for j := range got {
			g := &got[j]
			if !slices.Contains(cur, g.m) {
				g.m.seq = seq // a meter made for this answer, seen by no one else yet
			}
			i := slices.IndexFunc(ms, func(o *liveMeter) bool { return o.name == g.m.name })
			switch {
			case i >= 0 && (ms[i] == g.m || ms[i].key == g.m.key && ms[i].same(g.m)):
				g.m = ms[i] // the same limits (an answer read at the same time stated them)
			case i >= 0 && ms[i].seq > seq:
				g.m = ms[i] // stated by the answer to a later request: req's is older news
				// and its figures are of the quota it stated, not of this meter's
				g.remaining = headers.Unknown
			case i >= 0:
				ms[i] = g.m
				changed = append(changed, g.m)
			case len(ms) < maxMeters:
				ms = append(ms, g.m)
				changed = append(changed, g.m)
			case !l.full:
				l.full = true
				t.logger.LogAttrs(req.Context(), slog.LevelWarn, "ratemonitor: the upstream states more limits than a key keeps; the others are not paced on",
					slog.String("key", key), slog.String("meter", g.m.name), slog.Int("max", maxMeters))
			}
		}
		lk.meters = ms
		l.mu.Unlock()
	}
	for _, m := range changed {
		t.limitChanged(m.keyFor(key), m)
	}
	if len(changed) > 0 {
		t.putLearned(req, key, lk, now)
	}
	if len(got) == 0 {
		// A refusal that states no limit (a 429 with Retry-After alone): no meter to pause,
		// so the key's requests wait here, in this process.
		if retry, refused := retryPause(resp, headerparse.ParseRetryAfter(resp.Header, hnow)); refused {
			if retry <= 0 {
				retry = t.sync.Fallback
			}
			until := now.Add(min(retry, t.sync.MaxPause))
			l.mu.Lock()
			if until.After(lk.paused) {
				lk.paused = until
			}
			l.mu.Unlock()
			if t.obs != nil {
				t.obs.Observe(observe.Event{Kind: observe.Paused, Key: key, Until: until})
			}
		}
	}
	t.keepLearned(req, key, now, hnow, resp, got)
}

// ietfMeter returns the meter policy p states for key (cur's when its limits are the same),
// and what the answer says of it; false when p states no limit a meter can keep: no quota, a
// unit that is not one of draft-11's, a rate without a window.
func (t *Transport) ietfMeter(key string, p headers.Policy, cur []*liveMeter) (learned, bool) {
	unit := p.Unit
	switch unit {
	case "", "request", unitRequests:
		unit = unitRequests
	case unitBytes, unitConcurrent:
	default:
		return learned{}, false
	}
	name := "ietf:" + p.Name
	i := slices.IndexFunc(cur, func(m *liveMeter) bool { return m.name == name })
	if p.Quota == headers.Unknown {
		// RateLimit alone: what remains of a policy learned before, if its partition is the same.
		if i < 0 || cur[i].partition != p.Partition || cur[i].strat == nil {
			return learned{}, false
		}
		return learned{m: cur[i], remaining: p.Remaining, limit: cur[i].rules[0].Limit, reset: p.Reset}, true
	}
	mk := name + ":" + key
	if p.Partition != "" {
		// Quotas are kept per partition key (sections 3.1.4, 4.1.3): every request key whose
		// answers carry it shares the meter.
		mk = name + ":pk:" + base64.StdEncoding.EncodeToString([]byte(p.Partition))
	}
	var rules []strategy.Rule
	inflight := 0
	switch {
	case unit == unitConcurrent && p.Quota >= 1 && t.sync.learn.f != nil:
		inflight = p.Quota // slots are leases: kept only over a store that holds them
	case unit == unitConcurrent, p.Quota < 1, p.Window <= 0, p.Window > strategy.MaxWindow:
		return learned{}, false
	default:
		rules = []strategy.Rule{{Limit: p.Quota, Window: p.Window}}
	}
	m := &liveMeter{meter: meter{name: name, key: mk}, unit: unit, rules: rules, inflight: inflight, partition: p.Partition}
	if i >= 0 && cur[i].key == mk && cur[i].same(m) {
		m = cur[i]
	} else if m = t.newLearned(name, mk, unit, p.Partition, rules, inflight); m == nil {
		return learned{}, false
	}
	return learned{m: m, remaining: p.Remaining, limit: p.Quota, reset: p.Reset}, true
}

// xrlMeter returns the meter X-RateLimit-Limit states for key: its limit in a window of the
// longest reset seen (windowFor), or SyncConfig.XRateLimitWindow when set.
func (t *Transport) xrlMeter(key string, x headerparse.XRateLimit, cur []*liveMeter) (learned, bool) {
	const name = "x-ratelimit"
	w := t.sync.XRateLimitWindow
	i := slices.IndexFunc(cur, func(m *liveMeter) bool { return m.name == name })
	if w == 0 {
		w = windowFor(x.Reset)
		if i >= 0 && len(cur[i].rules) > 0 {
			w = max(w, cur[i].rules[0].Window)
		}
	}
	rules := []strategy.Rule{{Limit: x.Limit, Window: w}}
	m := &liveMeter{meter: meter{name: name, key: name + ":" + key}, unit: unitRequests, rules: rules}
	if i >= 0 && cur[i].same(m) {
		m = cur[i]
	} else if m = t.newLearned(name, name+":"+key, unitRequests, "", rules, 0); m == nil {
		return learned{}, false
	}
	return learned{m: m, remaining: x.Remaining, limit: x.Limit, reset: x.Reset}, true
}

// keepLearned stores what resp said of the learned meters got: a remaining count raises a
// rate meter's usage (never lowers it); a limit used up pauses its meter until its reset; a
// refusal (headers.Refused) pauses the meters it used up until its Retry-After, or when it
// names none, every rate meter of the request's own key (not those other keys share: a
// partition key's, an app key's).
func (t *Transport) keepLearned(req *http.Request, key string, now, hnow time.Time, resp *http.Response, got []learned) {
	ra := headerparse.ParseRetryAfter(resp.Header, hnow)
	retry, refused := retryPause(resp, ra)
	// A refusal that gives no time at all pauses for the fallback what its fields do not.
	fallback := retry
	if refused && retry <= 0 {
		fallback = t.sync.Fallback
	}
	type update struct {
		m  *liveMeter
		up engine.Update
	}
	var ups []update
	usedUp := false
	for _, g := range got {
		if g.m == nil || g.m.strat == nil {
			continue
		}
		u := engine.Update{Pause: g.pause}
		if g.remaining != headers.Unknown {
			rule := g.m.rules[0]
			sig := headers.Signal{Window: rule.Window, Remaining: g.remaining, Limit: g.limit, Reset: g.reset}
			u.Reports = t.addReport(nil, g.m.strat, sig)
			if g.remaining == 0 {
				usedUp = true
				u.Pause = max(u.Pause, g.reset, 0)
				if refused {
					u.Pause = max(u.Pause, retry) // Retry-After takes precedence (section 7)
					if u.Pause <= 0 {
						u.Pause = fallback
					}
				}
			}
		}
		ups = append(ups, update{g.m, u})
	}
	if refused && !usedUp {
		for i := range ups {
			if !ups[i].m.shared() {
				ups[i].up.Pause = max(ups[i].up.Pause, fallback)
			}
		}
	}
	syncer, ok := t.store.(cache.Syncer)
	if !ok {
		return
	}
	ctx := context.WithoutCancel(req.Context())
	for _, u := range ups {
		u.up.Pause = min(u.up.Pause, t.sync.MaxPause)
		if u.up.Pause <= 0 && len(u.up.Reports) == 0 {
			continue
		}
		mk := u.m.keyFor(key)
		if mk == "" {
			continue // a meter Key that gave no key: RoundTrip refuses the key's requests
		}
		if err := syncer.Sync(ctx, u.m.strat, mk, u.up); err != nil {
			t.syncFailed(req, mk, err)
		} else if u.up.Pause > 0 && t.obs != nil {
			t.obs.Observe(observe.Event{Kind: observe.Paused, Key: mk, Until: now.Add(u.up.Pause)})
		}
	}
}

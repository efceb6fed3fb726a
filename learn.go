package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// learner is what a Transport made without rules keeps: the meters it learned per request key
// from the upstream's answers (learn_read.go), and those set at run time (SetMeter), both
// shared with the other Transports over the store (learn_store.go).
type learner struct {
	mu   sync.Mutex
	keys map[string]*learnedKey // request key → what was learned for it
	set  []*liveMeter           // SetMeter's, for every key, in the order set; replaced whole
	// f holds the slots of the concurrent-requests meters; nil when the store holds no leases
	// (cache.Leaser), and then such meters are not kept.
	f *inflight
	// full is set once a key had more policies than maxMeters, so that it is logged once.
	full bool
	// first is how many requests of a key with no answer yet go out before its first answer
	// (SyncConfig.FirstAnswer; the first-answer gate); 0: no gate (monitoring mode, or off).
	first int
	// reported are the meters whose limits WithCostReport's figures give (WithMeter's without
	// rules): their names, keys and costs.
	reported []*meter
	// setAt is when the set meters last changed (Unix ns, the writer's clock: learn_store.go);
	// setNext when the store's are read again.
	setAt   int64
	setNext atomic.Int64
}

// learnedKey is what a request key learned: its meters, and the requests sent while it had
// none that are not answered yet.
type learnedKey struct {
	meters []*liveMeter // replaced whole (readers keep the slice they took), under learner.mu
	// unmetered counts the key's requests sent with no meter and not yet answered. Once the
	// key has meters, a request waits for these answers first: the upstream counted those
	// requests, the meters did not, and their answers' remaining counts say how many it did.
	unmetered int
	settled   chan struct{} // closed when unmetered drops to 0; nil while nobody waits
	// sent numbers the key's requests in the order they are sent, so that an answer to an
	// earlier request, read after a later one's, does not undo the limits the later one stated.
	sent atomic.Uint64
	// known is set once an answer was read for the key: the first-answer gate is open.
	known   bool
	waiting int // requests waiting for an answer to lk's requests (for tests)
	// at is when the meters last changed (Unix ns, the writer's clock), under learner.mu;
	// next when the store's are read again; loaded is closed once they were read first.
	at     int64
	next   atomic.Int64
	loaded chan struct{}
	// paused is until when a refusal that stated no limit holds the key's requests, under
	// learner.mu (no meter to pause in the store: learn_read.go).
	paused time.Time
}

// Units of the IETF quota unit parameter qu (draft-ietf-httpapi-ratelimit-headers-11, section
// 3.1.2; its registry, section 10.3, spells the first "request").
const (
	unitRequests   = "requests"
	unitBytes      = "content-bytes"
	unitConcurrent = "concurrent-requests"
	// unitReport is a meter learned from WithCostReport's figures: charged its Meter.Cost,
	// or 1 on the report's own (reportRequests).
	unitReport = "report"
)

// reportRequests names the learned meter of a cost report's own figures (cost.Report.Signals):
// the request's own limit, such as OpenAI's requests a minute.
const reportRequests = "requests"

// liveMeter is one meter of a Transport made without rules: learned for one key, or set for
// every key.
type liveMeter struct {
	meter
	source    string // "learned" or "set"
	unit      string // unitRequests, unitBytes or unitConcurrent
	rules     []strategy.Rule
	inflight  int    // the requests allowed in progress at once (0: none kept)
	partition string // the IETF pk it was learned under
	seq       uint64 // the learnedKey.sent number of the request whose answer stated it
	spec      Meter  // a set meter as given to SetMeter (its rules may come from the store)
}

// same reports whether m keeps the same limits as o.
func (m *liveMeter) same(o *liveMeter) bool {
	return m.unit == o.unit && m.inflight == o.inflight && m.partition == o.partition && slices.Equal(m.rules, o.rules)
}

// shared reports whether m counts under a key other request keys share: an IETF partition
// key's, or the app key of a meter learned from a cost report.
func (m *liveMeter) shared() bool {
	return m.partition != "" || m.unit == unitReport && m.key != ""
}

// learning returns the learner of a Transport made without rules, or nil.
func (t *Transport) learning() *learner {
	if t.strat != nil || t.sync == nil {
		return nil
	}
	return t.sync.learn
}

// startLearning settles, in New, a Transport given no rules: it learns its meters from the
// upstream's answers. What needs rules known before the first request is refused.
func (t *Transport) startLearning() error {
	switch {
	case len(t.meters) > 0 || len(t.setup.inflight.meters) > 0:
		var opt string
		if len(t.meters) > 0 {
			opt = t.meters[0].opt
		} else {
			opt = t.setup.inflight.meters[0].opt
		}
		return fmt.Errorf("ratemonitor: New: %s has limits (rules or InFlight) but the Transport has no rules: give WithRules too; or, to learn the meter's limits, give it no rules and give WithCostReport (Transport.SetMeter sets one at run time)", opt)
	case !t.setup.inflight.none() || t.setup.inflight.ttl != 0:
		return errors.New("ratemonitor: New: WithInFlight or WithAppInFlight without rules: give WithRules too; without rules a concurrent-requests policy of the upstream becomes an in-flight meter")
	case len(t.setup.learnedMeters) > 0 && t.costs.report == nil:
		return fmt.Errorf("ratemonitor: %s: no rules and no InFlight: give the meter's limits, or WithCostReport to learn them from its figures", t.setup.learnedMeters[0].opt)
	case slices.ContainsFunc(t.setup.learnedMeters, func(m *meter) bool { return m.name == reportRequests }):
		return fmt.Errorf("ratemonitor: New: WithMeter(%q) without rules: the name is the learned meter of the cost report's own figures; name the meter otherwise", reportRequests)
	case slices.ContainsFunc(t.setup.learnedMeters, func(m *meter) bool { return m.name == "x-ratelimit" || strings.HasPrefix(m.name, "ietf:") }):
		return errors.New(`ratemonitor: New: a meter without rules named "x-ratelimit" or "ietf:…": those names are the meters learned from X-RateLimit-* and the IETF fields; name the meter otherwise`)
	case len(t.setup.learnedMeters) >= maxMeters:
		return fmt.Errorf("ratemonitor: New: %d meters without rules: with the learned meter %q a key would keep more than %d; merge meters", len(t.setup.learnedMeters), reportRequests, maxMeters)
	case t.costs.fn != nil:
		return errors.New("ratemonitor: New: WithCost without rules: give WithRules too; without rules a request costs 1, a content-bytes policy its body size, a learned meter its Cost")
	case t.costs.report != nil && len(t.setup.learnedMeters) == 0:
		return errors.New("ratemonitor: New: WithCostReport without rules: give WithRules too, or meters with a Cost and no rules (WithMeter) whose limits the report's figures give")
	case t.pace.smooth:
		return errors.New("ratemonitor: New: WithSmoothing without rules: give WithRules too")
	case t.setup.degradedCfg != nil || (t.setup.policySet && t.fail.policy == Degrade):
		return errors.New("ratemonitor: New: StoreErrorPolicy Degrade without rules: the degraded mode needs limits known at New; choose SendNothing or SendUncounted")
	case t.sync != nil && t.sync.checked != nil && slices.Contains(t.sync.checked, true) && t.sync.xrlAt == 0:
		return errors.New("ratemonitor: New: WithSync with Readers and no rules: without rules the Transport reads the IETF RateLimit fields and X-RateLimit-* itself; drop Readers, or give WithRules")
	case t.sync != nil && len(t.sync.Fixed) > 0:
		// Fixed names a rule's window, checked against the rules at New; learned meters
		// are not marked fixed (no probe interval is kept for them).
		return errors.New("ratemonitor: New: WithSync with Fixed and no rules: Fixed names the windows of rules given to New; give WithRules, or drop Fixed")
	}
	if !t.setup.policySet {
		// A paced Transport's default, Degrade, needs known limits; an in-process store's
		// Degrade is SendNothing anyway.
		t.fail.policy, t.setup.policySet = SendUncounted, true
		if t.pace.on {
			t.fail.policy = SendNothing
		}
	}
	if t.sync == nil {
		if err := WithSync(SyncConfig{})(t); err != nil {
			return err
		}
	}
	t.sync.learn = &learner{keys: map[string]*learnedKey{}, first: t.sync.firstAnswer(t.pace.on), reported: t.setup.learnedMeters}
	return nil
}

// startLearnedInFlight makes the slots of learned concurrent-requests meters, once the store is
// known: leases in the store, as WithInFlight's.
func (t *Transport) startLearnedInFlight() {
	l := t.learning()
	lz, ok := t.store.(cache.Leaser)
	if l == nil || !ok {
		return
	}
	f := &inflight{t: t, leaser: lz, cfg: inflightConfig{ttl: defaultLeaseTTL},
		held: map[string]int{}, local: map[string]int{}, leases: map[*slot]struct{}{}, wakers: map[string]*waker{}}
	if m, ok := t.clock.(*clock.Manual); ok && m.Auto {
		f.noRenew = true
	}
	f.stopCtx, f.stop = context.WithCancel(context.Background())
	l.f = f
}

// key returns key's learned state, made on first use (made: the caller reads the store's
// limits for it, then closes lk.loaded).
func (l *learner) key(key string) (lk *learnedKey, made bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk = l.keys[key]
	if lk == nil {
		lk = &learnedKey{loaded: make(chan struct{})}
		l.keys[key] = lk
		made = true
	}
	return lk, made
}

// meters returns the meters a request of lk waits on once no request of lk sent without a
// meter is still unanswered: those set for every key, then lk's learned ones not named as a
// set one. It returns none, and counts the request in lk.unmetered, when there are none; but
// while lk has no answer, only l.first requests go so (the first-answer gate): the others wait
// for an answer, or for a failed one's place. paused is lk.paused, read under the same lock.
func (l *learner) meters(ctx context.Context, lk *learnedKey) (ms []*liveMeter, paused time.Time, err error) {
	for {
		l.mu.Lock()
		if len(lk.meters) == 0 && len(l.set) == 0 {
			if lk.known || l.first == 0 || lk.unmetered < l.first {
				lk.unmetered++
				paused = lk.paused
				l.mu.Unlock()
				return nil, paused, nil
			}
		} else if lk.unmetered == 0 {
			ms = l.set
			for _, m := range lk.meters {
				if !slices.ContainsFunc(l.set, func(s *liveMeter) bool { return s.name == m.name }) {
					ms = append(slices.Clip(ms), m)
				}
			}
			paused = lk.paused
			l.mu.Unlock()
			return ms, paused, nil
		}
		if lk.settled == nil {
			lk.settled = make(chan struct{})
		}
		ch := lk.settled
		lk.waiting++
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		l.mu.Lock()
		lk.waiting--
		l.mu.Unlock()
		if err != nil {
			return nil, paused, err
		}
	}
}

// answered counts an unmetered request of lk as done (after what its answer said was learned);
// ok: it was answered (the key is known from now on); else (a transport error, a 5xx) its
// place before the first answer goes to a waiter.
func (l *learner) answered(lk *learnedKey, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gated := !lk.known
	lk.known = lk.known || ok
	if lk.unmetered--; (lk.unmetered == 0 || gated) && lk.settled != nil {
		close(lk.settled)
		lk.settled = nil
	}
}

// roundTripLearned is RoundTrip for a Transport made without rules: the request is charged
// on every meter its key has learned (or SetMeter set) and paced on them with WithPacing,
// sent, and its answer read for the limits it states.
func (t *Transport) roundTripLearned(base http.RoundTripper, req *http.Request, l *learner) (*http.Response, error) {
	key := t.Key(req)
	lk, made := l.key(key)
	fail := func(err error) (*http.Response, error) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if made {
		func() {
			defer close(lk.loaded) // even if the store or an observer panics
			t.loadLimits(req, key, lk, true)
		}()
	} else {
		select {
		case <-lk.loaded:
		case <-req.Context().Done():
			return fail(req.Context().Err())
		}
		t.loadLimits(req, key, lk, false)
	}
	if err := req.Context().Err(); err != nil {
		return fail(err) // it ended while the store was read
	}
	ms, paused, err := l.meters(req.Context(), lk)
	if err != nil {
		return fail(err)
	}
	if err := t.learnedPause(req.Context(), key, paused); err != nil {
		if len(ms) == 0 {
			l.answered(lk, false) // not sent: its place goes to a waiter
		}
		return fail(err)
	}
	if len(ms) == 0 {
		done := false
		defer func() {
			if !done { // base panicked: no answer; a waiter takes the place
				l.answered(lk, false)
			}
		}()
		resp, err := t.sendLearned(base, req, key, lk, nil)
		done = true
		l.answered(lk, answered(resp, err))
		return resp, err
	}
	h := &held{f: l.f}
	lim, err := t.learnedCharges(req, key, ms, h)
	if err != nil {
		h.release()
		return fail(err)
	}
	var ch *charge // kept for WithCostReport's corrections; nil: nothing to correct
	if len(lim.meters) > 0 {
		ctx := req.Context()
		var at, local time.Time
		if t.pace.on {
			at, local, err = t.acquire(ctx, key, 1, t.fail.policy == SendUncounted, t.costs.report != nil, lim)
		} else if err = t.recordAll(ctx, key, 1, lim); err != nil && ctx.Err() != nil {
			err = gaveUp(ctx, err)
		}
		se, isStore := errors.AsType[*StoreError](err)
		if isStore {
			t.storeFailed(req, se.Key, se.Err)
		}
		switch {
		case isStore && t.fail.policy == SendUncounted:
			// sent anyway, uncounted: no charge to correct
		case err != nil:
			h.release()
			return fail(err)
		case t.costs.report != nil:
			ch = &charge{n: 1, lim: lim, at: at, local: local, gen: t.gen()}
		}
	}
	resp, err := t.sendLearned(base, req, key, lk, ch)
	if err != nil || resp == nil {
		h.release()
		return resp, err
	}
	return h.attach(resp), nil
}

// learnedCharges returns req's charges on the rate meters of ms (a content-bytes meter's is
// the request's body size), having taken a slot of each concurrent-requests meter into h. A
// meter a request costs 0 on does not apply to it; a cost no window can ever hold is an error.
func (t *Transport) learnedCharges(req *http.Request, key string, ms []*liveMeter, h *held) (limits, error) {
	var lim limits
	for _, m := range ms {
		n := 1
		if m.cost != nil {
			var err error
			if n, err = callCost("meter", m.name, m.cost, req); err != nil {
				return lim, err
			}
			if n == 0 {
				continue
			}
		}
		mk := m.keyFor(key)
		if mk == "" {
			return lim, meterKeyErr(&m.meter, key)
		}
		if m.inflight > 0 && h.f != nil {
			s, err := h.f.takeOne(req.Context(), mk, meterInflightQueue+m.name+"\x00"+mk, m.inflight, func() error { return nil })
			if se, ok := errors.AsType[*StoreError](err); ok && t.fail.policy == SendUncounted {
				t.storeFailed(req, se.Key, se.Err)
				err = nil
			}
			if err != nil {
				return lim, err
			}
			if s != nil {
				h.slots = append(h.slots, s)
			}
		}
		if m.strat == nil {
			continue
		}
		if err := m.strat.CheckBurst(n); err != nil {
			if m.unit == unitReport {
				// A limit a cost report said is not a choice: a request it could
				// never admit goes uncharged there, and its answer says the limit again.
				continue
			}
			return lim, fmt.Errorf("ratemonitor: not sent: request cost %d on meter %q, key %q: %w", n, m.name, mk, err)
		}
		lim.meters = append(lim.meters, meterCharge{m: &m.meter, strat: m.strat, key: mk, n: n})
	}
	return lim, nil
}

// bodyBytes is a content-bytes meter's cost: the request's body size (ContentLength; a body
// of unknown length is charged nothing, and the upstream's remaining count, when it sends
// one, brings the meter up to what it counted).
func bodyBytes(req *http.Request) int {
	return int(min(max(req.ContentLength, 0), 1<<31))
}

// SetMeter adds m to a Transport made without rules, or replaces the meter of that name, at
// run time: every request of every key is charged on it from then on, as WithMeter's are, and
// a meter the Transport learned under that name (such as "ietf:burst", or "x-ratelimit")
// is no longer applied. Each call is reported as an observe.LimitChanged event (Op "set").
// The meters set are written to the store: every Transport over it made without rules sets
// them within 10 s (Op "shared"), keeping its own Key and Cost functions for a meter of the
// same name. It fails for a Transport made with rules, as WithMeter fails on m, or, with the
// meter set here, when the store could not share it. See docs/learning.md.
func (t *Transport) SetMeter(m Meter) error {
	l := t.learning()
	if l == nil {
		return errors.New("ratemonitor: SetMeter: the Transport has rules (or was not made by New): give its meters to New with WithMeter")
	}
	lm, err := t.setMeter(m, "set")
	if err != nil {
		return err
	}
	// Start from the store's set when it is newer, so that meters other Transports set stay.
	var stored storedLimits
	var storeErr error
	if s := t.limitsStore(); s != nil {
		var b []byte
		if b, storeErr = s.Limits(context.Background(), setLimitsKey); storeErr == nil {
			stored, _ = t.decodeLimits(b)
		}
	}
	l.mu.Lock()
	set, setAt := l.set, l.setAt
	l.mu.Unlock()
	if stored.At > setAt {
		set = t.buildSet(stored.Meters, set, sharedOp)
	}
	set = slices.Clone(set)
	if i := slices.IndexFunc(set, func(o *liveMeter) bool { return o.name == m.Name }); i >= 0 {
		set[i] = lm
	} else if len(set) >= maxMeters {
		return fmt.Errorf("ratemonitor: SetMeter(%q): more than %d meters set: merge meters that count under the same key", m.Name, maxMeters)
	} else {
		set = append(set, lm)
	}
	l.mu.Lock()
	at := max(t.clock.Now().UnixNano(), after(l.setAt), after(stored.At))
	l.set, l.setAt = set, at
	l.mu.Unlock()
	t.limitChanged(m.AppKey, lm)
	if storeErr == nil {
		storeErr = t.putSet(context.Background(), at)
	}
	if storeErr != nil {
		return fmt.Errorf("%w: %w", errNotShared, storeErr)
	}
	return nil
}

// setMeter returns the set meter m makes, reported with Op source.
func (t *Transport) setMeter(m Meter, source string) (*liveMeter, error) {
	var staged Transport
	if err := WithMeter(m)(&staged); err != nil {
		return nil, err
	}
	if len(staged.setup.learnedMeters) > 0 {
		return nil, fmt.Errorf("ratemonitor: SetMeter(%q): no rules and no InFlight: give the meter's limits", m.Name)
	}
	m.Rules = slices.Clone(m.Rules)
	lm := &liveMeter{source: source, unit: unitRequests, rules: m.Rules, inflight: m.InFlight, spec: m}
	switch {
	case len(staged.meters) > 0:
		lm.meter = *staged.meters[0]
	default:
		lm.meter = *staged.setup.inflight.meters[0].meter
	}
	if m.InFlight > 0 && t.sync.learn.f == nil {
		return nil, fmt.Errorf("ratemonitor: SetMeter(%q): InFlight %d: the store (%T) holds no in-flight leases (cache.Leaser)", m.Name, m.InFlight, t.store)
	}
	return lm, nil
}

// limitChanged reports m, new or changed, on key to the observer, if any.
func (t *Transport) limitChanged(key string, m *liveMeter) {
	if t.obs == nil {
		return
	}
	rules := make([]observe.RuleUsage, 0, len(m.rules)+1)
	for _, r := range m.rules {
		rules = append(rules, observe.RuleUsage{Rule: r.String(), Limit: r.Limit - r.Headroom})
	}
	if m.inflight > 0 {
		rules = append(rules, observe.RuleUsage{Rule: "inflight", Limit: m.inflight})
	}
	t.obs.Observe(observe.Event{Kind: observe.LimitChanged, Key: key, Op: m.source, Rules: rules})
}

// newLearned returns a learned meter named name on meter key mk, or nil when rules cannot make
// a strategy (or the store cannot hold it).
func (t *Transport) newLearned(name, mk, unit, partition string, rules []strategy.Rule, inflight int) *liveMeter {
	m := &liveMeter{meter: meter{name: name, key: mk, opt: "learned meter " + name}, source: "learned",
		unit: unit, rules: rules, inflight: inflight, partition: partition}
	switch {
	case unit == unitBytes:
		m.cost = bodyBytes
	case unit == unitReport && name != reportRequests:
		// A meter WithMeter gave without rules: its key and cost are that meter's; one this
		// Transport was not given (a store's, written by another) is not kept.
		i := slices.IndexFunc(t.sync.learn.reported, func(o *meter) bool { return o.name == name })
		if i < 0 || t.sync.learn.reported[i].key != mk {
			return nil
		}
		m.keyOf, m.cost = t.sync.learn.reported[i].keyOf, t.sync.learn.reported[i].cost
	}
	if len(rules) > 0 {
		s, err := rollingwindow.New(rules...)
		if err != nil {
			return nil
		}
		if v := traitsOf(t.store).Validate; v != nil && v(s) != nil {
			return nil
		}
		m.strat = s
	}
	return m
}

// learnedWindows are the windows an X-RateLimit-* limit is taken to have, the smallest that
// holds the longest reset seen: the fields do not say the window, and a reset read mid-window
// is shorter than it. A window longer than the upstream's paces slower, never faster.
var learnedWindows = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
	15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
	15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// windowFor returns the learned window for a reset of d: the smallest of learnedWindows that
// holds it, or d rounded up to whole seconds beyond a day (at most strategy.MaxWindow).
func windowFor(d time.Duration) time.Duration {
	for _, w := range learnedWindows {
		if d <= w {
			return w
		}
	}
	return min((d+time.Second-1)/time.Second*time.Second, strategy.MaxWindow)
}

// learnedStatus is Status for a Transport made without rules: the status of each rate meter
// key is charged on now (SetMeter's, then those it learned).
func (t *Transport) learnedStatus(ctx context.Context, key string) (Status, error) {
	l := t.learning()
	l.mu.Lock()
	ms := slices.Clone(l.set)
	if lk := l.keys[key]; lk != nil {
		for _, m := range lk.meters {
			if !slices.ContainsFunc(l.set, func(s *liveMeter) bool { return s.name == m.name }) {
				ms = append(ms, m)
			}
		}
	}
	l.mu.Unlock()
	st := Status{Key: key}
	for _, m := range ms {
		if m.strat == nil {
			continue // in-flight only: Transport.InFlight does not count these; the store's leases do
		}
		mk := m.keyFor(key)
		if mk == "" {
			return st, meterKeyErr(&m.meter, key)
		}
		ms, err := t.status(ctx, m.strat, mk)
		ms.Meter = m.name
		st.Meters = append(st.Meters, ms)
		st.Wait = max(st.Wait, ms.Wait)
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// learnedPause waits until a key's pause (a refusal that stated no limit) has ended, on the
// Transport's clock; a *DeadlineError when that would pass ctx's deadline, or ctx's error.
func (t *Transport) learnedPause(ctx context.Context, key string, until time.Time) error {
	if until.IsZero() {
		return nil
	}
	d := until.Sub(t.clock.Now())
	if d <= 0 {
		return nil
	}
	if err := deadlineCheck(ctx, key, "", 1, d); err != nil {
		return err
	}
	return t.clock.Sleep(ctx, d)
}

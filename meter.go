package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Meter is a limit the upstream keeps besides the request's own rules (WithRules): a count of
// its own, under a key of its own, in a unit of its own, such as GitHub's 900 points a minute
// per token beside its 5000 requests an hour, or Xero's 10 000 calls a minute per app.
// WithMeter adds one; a request is charged on the rules and on every meter that applies to it,
// and paced until all have room (docs/meters.md).
type Meter struct {
	// Name says what the meter counts ("points", "app"): in errors, in its keys, and for
	// Transport.Meter. Names are unique within a Transport.
	Name string
	// AppKey, when set, is the meter's one key: every request is counted under it (an
	// app-wide limit). Choose one no request is keyed by, such as "xero-app:<client id>".
	AppKey string
	// Key returns the meter's key for a request's key (nil, without AppKey: Name + ":" + key).
	// It must return a key no request is keyed by; "" or a panic makes RoundTrip fail.
	Key func(key string) string
	// Rules are the meter's rolling windows, layered on each of its keys. None and no InFlight:
	// learned from WithCostReport's figures, in a Transport without rules.
	Rules []strategy.Rule
	// InFlight is the most requests in progress at once on each of the meter's keys (0: none
	// kept), held as WithInFlight holds a key's, by the requests it applies to (Cost not 0): a
	// meter may keep Rules, InFlight or both.
	InFlight int
	// Cost is what req costs on the meter; 0 when the meter does not apply to req (nil: the
	// request's own cost, 1 or WithCost's, corrected as it is by WithCostReport). A
	// Reservation's slots cost 1 each on every meter.
	Cost func(req *http.Request) int
}

// meter is a Meter made ready: its rules as a strategy.
type meter struct {
	name  string
	key   string // AppKey: the meter's only key ("" when keyOf gives it)
	keyOf func(string) string
	strat *engine.Strategy
	cost  func(*http.Request) int
	opt   string // the option that set it, for errors: WithMeter("points"), WithAppRules
}

// keyFor returns the meter's key for a request key.
func (m *meter) keyFor(key string) string {
	if m.key != "" {
		return m.key // small enough to inline: an app key costs no call
	}
	return m.derivedKey(key)
}

// derivedKey is keyFor for a meter without an app key. Never inlined, so that keyFor is.
//
//go:noinline
func (m *meter) derivedKey(key string) (mk string) {
	if m.keyOf == nil {
		return m.name + ":" + key
	}
	defer func() {
		if recover() != nil {
			mk = "" // refused by meterKeyErr, as a Key that returns "" is
		}
	}()
	return m.keyOf(key)
}

// meterKeyErr is the error for a meter whose Key gave "" (or panicked) for key: nothing is sent
// or counted.
func meterKeyErr(m *meter, key string) error {
	return fmt.Errorf("ratemonitor: meter %q: not sent: its Key func returned \"\" or panicked for key %q: it must return a key of its own for every key", m.name, key)
}

// checkKeys returns meterKeyErr for the first charge of lim whose meter key is "".
func (l limits) checkKeys(key string) error {
	for _, c := range l.meters {
		if c.key == "" {
			return meterKeyErr(c.m, key)
		}
	}
	return nil
}

// WithMeter charges every request also on m, when m applies to it (see Meter). Pacing
// (WithPacing, Reserve) waits until the request's key and every meter's key have room, and
// records on all at the same moment: a slot is never held while waiting for another, since it
// would count from before the send. A waiter refused by a meter takes its turn at that meter's
// key, where every key's waiters are served in order (by priority first, see Priority), so
// that a burst is not starved by single requests (docs/meters.md#what-holds). New fails when m
// has no name, no rules and no InFlight, a rule is invalid, or another meter has its name
// (WithAppRules' is "app") or its AppKey. Without WithRules, a meter with Cost and no rules or
// InFlight is learned: its limits come from WithCostReport's figures for it (docs/learning.md).
func WithMeter(m Meter) Option {
	m.Rules = slices.Clone(m.Rules) // the option is a value: the caller may reuse the slice
	return func(t *Transport) error {
		if m.Name == "" {
			return errors.New("ratemonitor: WithMeter: the meter has no name: name what it counts, such as \"points\"")
		}
		if m.AppKey != "" && m.Key != nil {
			return fmt.Errorf("ratemonitor: WithMeter(%q): both AppKey and Key are set: give AppKey for one key of the whole app, or Key to derive one per request key", m.Name)
		}
		opt := fmt.Sprintf("WithMeter(%q)", m.Name)
		switch {
		case m.InFlight < 0:
			return fmt.Errorf("ratemonitor: %s: InFlight %d is negative: give at least 1, or 0 to keep none", opt, m.InFlight)
		}
		return t.addMeter(meter{name: m.Name, key: m.AppKey, keyOf: m.Key, cost: m.Cost, opt: opt}, m.Rules, m.InFlight)
	}
}

// maxMeters bounds the meters of a Transport: a request's charges are taken one meter at a
// time, and an upstream that keeps more counts than this is not known.
const maxMeters = 8

// addMeter adds m, with rules as rolling windows (none: no rate meter) and a cap of inflight
// requests in progress (0: none), to the Transport's meters. Its errors, naming m.opt: a name
// or an app key another meter has (two meters on one key would count in one counter, or hold
// two leases of one key each), too many meters, an invalid rule.
func (t *Transport) addMeter(m meter, rules []strategy.Rule, inflight int) error {
	all := append(t.allMeters(), t.setup.learnedMeters...)
	for _, o := range all {
		switch {
		case o.name == m.name:
			return fmt.Errorf("ratemonitor: %s: a meter named %q is already set (by WithMeter or WithAppRules): give each meter a name of its own", m.opt, m.name)
		case m.key != "" && o.key == m.key:
			return fmt.Errorf("ratemonitor: %s: the app key %q is meter %q's already: two meters on one key would count in one counter; give the limits to one meter", m.opt, m.key, o.name)
		}
	}
	if len(all) == maxMeters {
		return fmt.Errorf("ratemonitor: %s: more than %d meters: merge meters that count under the same key", m.opt, maxMeters)
	}
	if len(rules) > 0 {
		s, err := rollingwindow.New(rules...)
		if err != nil {
			return fmt.Errorf("ratemonitor: %s: %w", m.opt, err)
		}
		m.strat = s
		t.meters = append(t.meters, &m)
	}
	if inflight > 0 {
		t.setup.inflight.meters = append(t.setup.inflight.meters, inflightMeter{meter: &m, n: inflight})
	}
	if len(rules) == 0 && inflight == 0 {
		// Its limits are learned (New refuses it when the Transport has rules).
		t.setup.learnedMeters = append(t.setup.learnedMeters, &m)
	}
	return nil
}

// allMeters returns every meter, with rules or only a cap on requests in progress, once each.
func (t *Transport) allMeters() []*meter {
	all := slices.Clone(t.meters)
	for _, f := range t.setup.inflight.meters {
		if f.strat == nil {
			all = append(all, f.meter)
		}
	}
	return all
}

// WithAppRules counts every request also under appKey with rules of its own (rolling windows):
// a limit the upstream applies to the whole app across every key, such as Xero's 10 000 calls
// per minute per app across all tenants. It is WithMeter(Meter{Name: "app", AppKey: appKey,
// Rules: rules}); WithSync sends the upstream's app-wide figures (Xero's
// X-AppMinLimit-Remaining) to appKey. New fails when appKey is empty, a rule is invalid, or
// a meter named "app" is already set (WithAppRules twice).
func WithAppRules(appKey string, rules ...strategy.Rule) Option {
	rules = slices.Clone(rules) // the option is a value: the caller may reuse the slice
	return func(t *Transport) error {
		if appKey == "" {
			return errors.New("ratemonitor: WithAppRules: the app key is empty: choose one no request is keyed by, such as \"xero-app:<client id>\"")
		}
		return t.addMeter(meter{name: "app", key: appKey, opt: "WithAppRules"}, rules, 0)
	}
}

// AppKey returns the key of the Transport's app meter, the first meter with one key for every
// request (WithAppRules, or a Meter with AppKey), and false when there is none. The upstream's
// app-wide figures (WithSync) and WithAppInFlight go to that meter.
func (t *Transport) AppKey() (string, bool) {
	if m := t.appMeter(); m != nil {
		return m.key, true
	}
	return "", false
}

// appMeter returns the first meter with rules and an app key, or nil: where the upstream's
// app-wide figures go.
func (t *Transport) appMeter() *meter {
	for _, m := range t.meters {
		if m.key != "" {
			return m
		}
	}
	return nil
}

// appKeyMeter returns the first meter with an app key, with rules or only a cap on requests in
// progress, or nil: where WithAppInFlight's cap goes.
func (t *Transport) appKeyMeter() *meter {
	for _, m := range t.allMeters() {
		if m.key != "" {
			return m
		}
	}
	return nil
}

// meterNamed returns the meter called name, or nil.
func (t *Transport) meterNamed(name string) *meter {
	for _, m := range t.meters {
		if m.name == name {
			return m
		}
	}
	return nil
}

// MeterView answers for one meter of a Transport (Transport.Meter): what its key for a request
// key holds now, and how long a charge waits there. Its zero value answers ErrNotConfigured.
type MeterView struct {
	t    *Transport
	m    *meter
	name string
}

// Meter returns the answers of the meter called name (WithMeter's Name; WithAppRules' is
// "app"). For a name no meter with rules has, the view's methods return an error naming the
// meters there are. The request's own rules are Transport.AllocationUsed's and WaitTime's.
func (t *Transport) Meter(name string) MeterView {
	if t == nil {
		return MeterView{}
	}
	return MeterView{t: t, m: t.meterNamed(name), name: name}
}

// meter returns v's meter, or the error its methods return.
func (v MeterView) meter() (*meter, error) {
	switch {
	case v.t == nil || v.t.strat == nil:
		return nil, ErrNotConfigured
	case v.m == nil && slices.ContainsFunc(v.t.allMeters(), func(m *meter) bool { return m.name == v.name }):
		return nil, fmt.Errorf("ratemonitor: meter %q keeps no rules, only a cap on requests in progress: Transport.InFlight(key) reports its slots", v.name)
	case v.m == nil:
		names := make([]string, len(v.t.meters))
		for i, m := range v.t.meters {
			names[i] = fmt.Sprintf("%q", m.name)
		}
		return nil, fmt.Errorf("ratemonitor: no meter named %q: the meters are [%s] (WithMeter, WithAppRules)", v.name, strings.Join(names, " "))
	}
	return v.m, nil
}

// AllocationUsed returns, for each of the meter's rules in order, what its key for the
// request key key holds now, in the meter's unit, and what remains. Errors come from the
// store, or say that there is no such meter.
func (v MeterView) AllocationUsed(ctx context.Context, key string) ([]strategy.Usage, error) {
	m, err := v.meter()
	if err != nil {
		return nil, err
	}
	mk := m.keyFor(key)
	if mk == "" {
		return nil, meterKeyErr(m, key)
	}
	snap, err := v.t.ops.Peek(ctx, m.strat, mk, 0)
	return snap.Usage, err
}

// WaitTime returns how long until a charge of burst (in the meter's unit) fits on the meter's
// key for key; 0 when it fits now. Errors are Transport.WaitTime's, or say that there is no
// such meter.
func (v MeterView) WaitTime(ctx context.Context, key string, burst int) (time.Duration, error) {
	m, err := v.meter()
	if err != nil {
		return 0, err
	}
	return v.t.meterWaitTime(ctx, m, key, burst)
}

// WaitSeconds is WaitTime in whole seconds, rounded up so that sleeping that long is never
// early.
func (v MeterView) WaitSeconds(ctx context.Context, key string, burst int) (int, error) {
	d, err := v.WaitTime(ctx, key, burst)
	return int((d + time.Second - 1) / time.Second), err
}

// meterWaitTime returns the wait for a charge of burst on m's key for key.
func (t *Transport) meterWaitTime(ctx context.Context, m *meter, key string, burst int) (time.Duration, error) {
	mk := m.keyFor(key)
	if mk == "" {
		return 0, meterKeyErr(m, key)
	}
	if err := m.strat.CheckBurst(burst); err != nil {
		return 0, fmt.Errorf("ratemonitor: meter %q, key %q: %w", m.name, mk, err)
	}
	snap, err := t.ops.Peek(ctx, m.strat, mk, burst)
	return snap.Wait, err
}

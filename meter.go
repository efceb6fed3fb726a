package ratemonitor

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Meter is a limit the upstream keeps besides the request's own rules (WithRules): a count of
// its own, under a key of its own, in a unit of its own, such as GitHub's 900 points a minute
// per token beside its 5000 requests an hour, or Xero's 10 000 calls a minute per app.
// WithMeter adds one; a request is charged on the rules and on the meter, and paced until both
// have room (docs/meters.md).
type Meter struct {
	// Name says what the meter counts ("points", "app"): in errors, and in its keys.
	Name string
	// AppKey, when set, is the meter's one key: every request is counted under it (an
	// app-wide limit). Choose one no request is keyed by, such as "xero-app:<client id>".
	AppKey string
	// Key returns the meter's key for a request's key (nil, without AppKey: Name + ":" + key).
	// It must return a key no request is keyed by, never "", and must not panic.
	Key func(key string) string
	// Rules are the meter's rolling windows, layered on each of its keys.
	Rules []strategy.Rule
	// Cost is what req costs on the meter, at least 1 (nil: the request's own cost, 1 or
	// WithCost's, corrected as it is by WithCostReport). A Reservation's slots cost 1 each.
	Cost func(req *http.Request) int
}

// meter is a Meter made ready: its rules as a strategy.
type meter struct {
	name  string
	key   string // AppKey: the meter's only key ("" when keyOf gives it)
	keyOf func(string) string
	strat *engine.Strategy
	cost  func(*http.Request) int
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
func (m *meter) derivedKey(key string) string {
	if m.keyOf != nil {
		return m.keyOf(key)
	}
	return m.name + ":" + key
}

// WithMeter charges every request also on m: see Meter. Pacing (WithPacing, Reserve) waits
// until the request's key and the meter's key both have room, and records on both at the same
// moment: a slot on the key is never held while waiting for the meter, since it would count
// from before the send. Waiters of every key take turns at a meter's key in the order they
// reach it (by priority first, see Priority), once their own key has room, so that a burst is
// not starved by single requests of other keys. WaitTime and Wait take both into account.
//
// New fails when m has no name or no rules, a rule is invalid, or a meter is given twice
// (WithMeter or WithAppRules): this release keeps one meter besides the request's rules.
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
		if len(m.Rules) == 0 {
			return fmt.Errorf("ratemonitor: %s: no rules: give the meter's limits", opt)
		}
		return t.setMeter(opt, meter{name: m.Name, key: m.AppKey, keyOf: m.Key, cost: m.Cost}, m.Rules)
	}
}

// setMeter makes m, with rules as rolling windows, the Transport's meter; opt names the option
// in the errors: a meter already set (this release keeps one), an invalid rule.
func (t *Transport) setMeter(opt string, m meter, rules []strategy.Rule) error {
	if t.app != nil {
		return fmt.Errorf("ratemonitor: %s: a meter is already set (%q, by WithMeter or WithAppRules): this release keeps one meter besides the request's rules", opt, t.app.name)
	}
	s, err := rollingwindow.New(rules...)
	if err != nil {
		return fmt.Errorf("ratemonitor: %s: %w", opt, err)
	}
	m.strat = s
	t.app = &m
	return nil
}

// WithAppRules counts every request also under appKey with rules of its own (rolling windows):
// a limit the upstream applies to the whole app across every key, such as Xero's 10 000 calls
// per minute per app across all tenants. It is WithMeter(Meter{Name: "app", AppKey: appKey,
// Rules: rules}); WithSync sends the upstream's app-wide figures (Xero's
// X-AppMinLimit-Remaining) to appKey. New fails when appKey is empty, a rule is invalid, or
// a meter is already set (WithAppRules twice, or a profile's meter such as GitHub's points:
// this release keeps one meter besides the request's rules).
func WithAppRules(appKey string, rules ...strategy.Rule) Option {
	rules = slices.Clone(rules) // the option is a value: the caller may reuse the slice
	return func(t *Transport) error {
		if appKey == "" {
			return errors.New("ratemonitor: WithAppRules: the app key is empty: choose one no request is keyed by, such as \"xero-app:<client id>\"")
		}
		return t.setMeter("WithAppRules", meter{name: "app", key: appKey}, rules)
	}
}

// AppKey returns the meter's key when it has one for every request (WithAppRules, or a Meter
// with AppKey), and false otherwise.
func (t *Transport) AppKey() (string, bool) {
	if t.app == nil || t.app.key == "" {
		return "", false
	}
	return t.app.key, true
}

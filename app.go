package ratemonitor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// appLimit is a set of rules every request is also counted under, on one key.
type appLimit struct {
	key   string
	strat *engine.Strategy
}

// WithAppRules counts every request also under appKey with rules of its own (rolling windows):
// a limit the upstream applies to the whole app across every key, such as Xero's 10 000 calls
// per minute per app across all tenants. Pacing (WithPacing, Reserve) waits until both the
// request's key and appKey have room, and records on both at the same moment: a slot on the
// key is never held while waiting for appKey, since it would count from before the send. Within
// one Transport, waiters of every key then take turns at appKey in the order they reach it
// (by priority first, see Priority), once their own key has room, so a burst is not starved by
// single requests of other keys; a waiter whose key is at its limit or paused waits for its
// key without holding up the others.
// WaitTime and Wait take both keys into account; WithSync sends the upstream's app-wide
// figures (Xero's X-AppMinLimit-Remaining) to appKey.
//
// appKey shares the store with request keys: choose one no request is keyed by, such as
// "xero-app:<client id>". New fails when appKey is empty or a rule is invalid.
func WithAppRules(appKey string, rules ...strategy.Rule) Option {
	rules = slices.Clone(rules) // the option is a value: the caller may reuse the slice
	return func(t *Transport) error {
		if appKey == "" {
			return errors.New("ratemonitor: WithAppRules: the app key is empty: choose one no request is keyed by, such as \"xero-app:<client id>\"")
		}
		s, err := rollingwindow.New(rules...)
		if err != nil {
			return fmt.Errorf("ratemonitor: WithAppRules: %w", err)
		}
		t.app = &appLimit{key: appKey, strat: s}
		return nil
	}
}

// AppKey returns the key of WithAppRules, and false without it.
func (t *Transport) AppKey() (string, bool) {
	if t.app == nil {
		return "", false
	}
	return t.app.key, true
}

package ratemonitor

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// checkReaders refuses a reader of WithSync (or of WithCostReport) that declares a window no
// rule has: its figures would otherwise be dropped on every response, and the user would
// believe the upstream's word was kept.
func (t *Transport) checkReaders() error {
	if t.sync != nil {
		for i, r := range t.sync.Readers {
			if !t.sync.checked[i] {
				continue
			}
			what := fmt.Sprintf("WithSync: reader %d", i)
			if i == t.sync.xrlAt-1 {
				what = fmt.Sprintf("WithSync: SyncConfig.XRateLimitWindow %v", t.sync.XRateLimitWindow)
			}
			if err := t.checkWindows(what, r); err != nil {
				return err
			}
		}
	}
	if err := t.checkFixedWindows(); err != nil {
		return err
	}
	if t.costs.report != nil {
		if err := t.checkWindows("WithCostReport", t.costs.report); err != nil {
			return err
		}
	}
	return nil
}

// checkWindows checks the windows r declares, if it declares any (headers.Windowed).
func (t *Transport) checkWindows(what string, r any) error {
	w, ok := r.(interface{ Windows() []headers.Window })
	if !ok {
		return nil
	}
	am := t.appMeter()
	for _, win := range w.Windows() {
		s, whose := t.strat, "the request's key"
		if win.App {
			whose = "the app key"
			if am == nil && win.Optional {
				continue // its figures are dropped (learn)
			}
			if am == nil {
				return fmt.Errorf("ratemonitor: %s: %v reads figures of the app key's %v window, and there are no app rules (the rules are %s): add WithAppRules with a rule of that window, or give a reader without app figures",
					what, r, win.Window, ruleList(t.strat))
			}
			s = am.strat
		}
		if !hasWindow(s, win.Window) && !win.Optional {
			app := "none"
			if am != nil {
				app = ruleList(am.strat)
			}
			return fmt.Errorf("ratemonitor: %s: %v reads figures of %s's %v window, and no rule has that window (the rules are %s; app rules: %s): give a rule with that window, or the reader the windows of your rules",
				what, r, whose, win.Window, ruleList(t.strat), app)
		}
	}
	return nil
}

func hasWindow(s *engine.Strategy, w time.Duration) bool {
	for i := range s.NumRules() {
		if s.Rule(i).Window == w {
			return true
		}
	}
	return false
}

func ruleList(s *engine.Strategy) string {
	rs := make([]string, s.NumRules())
	for i := range rs {
		rs[i] = s.Rule(i).String()
	}
	return strings.Join(rs, ", ")
}

// isNilFunc reports whether v is a nil func of a named func type (headers.ReaderFunc(nil)).
func isNilFunc(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Func && r.IsNil()
}

package ratemonitor

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// defaultProbe is how long a used-up fixed window with no known reset holds its key before one
// request goes out to ask the upstream again (SyncConfig.Fixed).
const defaultProbe = time.Minute

// checkFixed checks SyncConfig.Fixed and copies it, with the default probe filled in: the
// caller may change its map after New.
func checkFixed(cfg *SyncConfig) error {
	if cfg.Fixed == nil {
		return nil
	}
	fixed := make(map[time.Duration]time.Duration, len(cfg.Fixed))
	for w, probe := range cfg.Fixed {
		if w <= 0 || w > strategy.MaxWindow || probe < 0 || probe > cfg.MaxPause {
			return fmt.Errorf("ratemonitor: WithSync: Fixed[%v] = %v: the window must be from 1ns to %v and the probe interval from 0 (a minute) to MaxPause %v",
				w, probe, strategy.MaxWindow, cfg.MaxPause)
		}
		if probe == 0 {
			probe = min(defaultProbe, cfg.MaxPause)
		}
		fixed[w] = probe
		if cfg.nap == 0 || probe < cfg.nap {
			cfg.nap = probe
		}
	}
	cfg.Fixed = fixed
	return nil
}

// checkFixedWindows refuses a window of SyncConfig.Fixed that no rule has, on the request's key
// or on a meter: it would never be applied.
func (t *Transport) checkFixedWindows() error {
	if t.sync == nil {
		return nil
	}
	for _, w := range slices.Sorted(maps.Keys(t.sync.Fixed)) {
		found := hasWindow(t.strat, w)
		for _, m := range t.meters {
			found = found || (m.strat != nil && hasWindow(m.strat, w))
		}
		if !found {
			return fmt.Errorf("ratemonitor: WithSync: Fixed names the window %v, and no rule has it (the rules are %s): name the window of a rule, or add the rule",
				w, ruleList(t.strat))
		}
	}
	return nil
}

// markFixed marks rep, a report on rule r from sig, as a fixed window's (engine.Report.Fixed)
// when SyncConfig.Fixed names r's window. A used-up figure whose reset is unknown leaves one
// request of room (Used one below the limit), which probeWait holds back for the probe
// interval: that request, the probe, asks the upstream again and costs at most one refusal.
func (t *Transport) markFixed(rep *engine.Report, r strategy.Rule, sig headers.Signal) {
	if _, ok := t.sync.Fixed[r.Window]; !ok || sig.Reset == 0 {
		return // not fixed; or a reset of 0: that usage is freed already
	}
	rep.Fixed = true
	if rep.Reset == 0 && rep.Remaining == 0 {
		rep.Used = max(0, r.EffectiveLimit()-1)
	}
}

// probeWait returns how long the reports ask to hold their key before the probe: the longest
// probe interval of a used-up fixed window without a known reset among them (0: none). The
// reports are on the rules of s.
func (t *Transport) probeWait(s *engine.Strategy, reports []engine.Report) time.Duration {
	var wait time.Duration
	for _, rep := range reports {
		if rep.Fixed && rep.Reset == 0 && rep.Remaining == 0 {
			wait = max(wait, t.sync.Fixed[s.Rule(rep.Rule).Window])
		}
	}
	return wait
}

// fixedNap bounds a sleep of a waiter for room (d) by the shortest probe interval of
// SyncConfig.Fixed: a Sync may free a fixed rule early (its reset, a turned window), by this
// process or another sharing the store, and a waiter told the rolling window's wait (up to a
// day) must ask the store again to see it. Without fixed windows, a Sync only lengthens waits.
func (t *Transport) fixedNap(d time.Duration) time.Duration {
	if t.sync != nil && t.sync.nap > 0 {
		return min(d, t.sync.nap)
	}
	return d
}

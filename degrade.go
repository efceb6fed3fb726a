package ratemonitor

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/degrade"
)

// DefaultProbeInterval is how often, at most, a degraded Transport asks the shared store
// whether it answers again, unless DegradedConfig.ProbeInterval says otherwise.
const DefaultProbeInterval = 500 * time.Millisecond

// DegradedConfig sets the degraded mode of StoreErrorPolicy Degrade (WithDegraded). Its zero value
// is the default.
//
// While the shared store is unreachable, the Transport paces on a memory store of its own
// (cache.NewMemory, on the Transport's clock) with every rule's effective limit scaled to this
// process's share: floor(limit × share), at least 1, no headroom. For the fleet to stay
// within a limit, the shares of the processes sharing the store must add up to at most 1.
//
// A new master behind a Sentinel client (a store with SentinelMaster, such as redisstore's,
// naming another address) counts as an outage too, with the hold-back, and no probe before
// it has passed: the old master may have granted slots after the promotion that the new one
// never saw (docs/fleet.md#degraded-mode).
type DegradedConfig struct {
	// Share is the part of each limit this process may use while degraded, in (0, 1]. Give
	// Share or Processes, not both. When neither is given the share is 1 ÷ the number of
	// processes the store reports (cache.Traits.Processes, read when the outage begins), and 1
	// when the store does not report one: then each process alone may send up to the whole
	// limit, so set Share or Processes when several processes share the store.
	Share float64
	// Processes is the number of processes expected to share the store: the share is
	// 1 ÷ Processes. At least 1 when given.
	Processes int
	// ProbeInterval is the least time between two attempts to reach the shared store while
	// degraded (default DefaultProbeInterval, 500 ms). A probe is made by the caller whose
	// store operation comes due (no goroutine or timer is started); it waits at most the
	// store's own timeout, while every other caller is served from the memory store.
	ProbeInterval time.Duration
	// NoHoldBack gives up the hold-back at the start of an outage (see Degrade): a degraded
	// key may be granted at once. That keeps sending through an outage of a long window (a
	// day rule would otherwise send nothing for a day) at the price of the guarantee: in
	// the first longest window of an outage, the fleet may send up to the limit more than
	// the limit (what the shared store granted before it went, and every process's share).
	NoHoldBack bool
}

// WithDegraded sets the degraded mode's settings (see DegradedConfig) and chooses StoreErrorPolicy
// Degrade. New fails when the settings are out of range, or when WithStoreErrorPolicy chose
// another policy.
func WithDegraded(cfg DegradedConfig) Option {
	return func(t *Transport) error {
		switch {
		case math.IsNaN(cfg.Share) || cfg.Share < 0 || cfg.Share > 1:
			return fmt.Errorf("ratemonitor: WithDegraded: Share %v out of range: give a fraction in (0, 1], or 0 for the default", cfg.Share)
		case cfg.Processes < 0:
			return fmt.Errorf("ratemonitor: WithDegraded: Processes %d is negative: give at least 1, or 0 for the default", cfg.Processes)
		case cfg.Share > 0 && cfg.Processes > 0:
			return errors.New("ratemonitor: WithDegraded: give Share or Processes, not both")
		case cfg.ProbeInterval < 0:
			return fmt.Errorf("ratemonitor: WithDegraded: ProbeInterval %v is negative: give a positive duration, or 0 for the default (500ms)", cfg.ProbeInterval)
		}
		c := cfg
		t.setup.degradedCfg = &c
		return nil
	}
}

// resolvePolicy settles the StoreErrorPolicy once every option is applied: Degrade for a paced
// Transport when no policy was chosen (and whenever WithDegraded was given), SendUncounted for a
// monitoring one.
func (t *Transport) resolvePolicy() error {
	switch {
	case t.setup.degradedCfg != nil && t.setup.policySet && t.fail.policy != Degrade:
		return fmt.Errorf("ratemonitor: WithDegraded: it is for StoreErrorPolicy Degrade, but WithStoreErrorPolicy chose %s: drop one of them", t.fail.policy)
	case t.setup.degradedCfg != nil || (!t.setup.policySet && t.pace.on):
		t.fail.policy = Degrade
	case !t.setup.policySet:
		t.fail.policy = SendUncounted
	}
	return nil
}

// startDegrader sets up the degraded mode (its memory store is made at the first outage) when
// the policy is Degrade and the store lives outside the process: an in-process store
// (cache.Traits.InProcess, such as cache.Memory) is never unreachable, so there Degrade handles
// errors as SendNothing does. SQLite, though its clock is in this process, is shared through
// its file and degrades.
func (t *Transport) startDegrader() error {
	t.ops = t.store
	if t.fail.policy != Degrade {
		return nil
	}
	if traitsOf(t.store).InProcess {
		return nil
	}
	cfg := DegradedConfig{}
	if t.setup.degradedCfg != nil {
		cfg = *t.setup.degradedCfg
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	longest := t.strat.Longest()
	for _, m := range t.meters {
		longest = max(longest, m.strat.Longest())
	}
	t.fail.deg = degrade.New(t.store, degrade.Config{Share: cfg.Share, Processes: cfg.Processes,
		ProbeInterval: cfg.ProbeInterval, NoHoldBack: cfg.NoHoldBack, Longest: longest,
		Clock: t.clock, Logger: t.logger, Observer: t.obs})
	t.ops = t.fail.deg
	return nil
}

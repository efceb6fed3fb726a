package ratemonitor

import "fmt"

// WithSmoothing makes the Transport spread a key's requests out instead of letting a batch take
// the whole allocation at once: beside every rule (effective limit L, effective window W) it
// keeps a GCRA with burst b = ⌈L/2⌉ and emission interval T = W/(L − b + 1), rounded up to the
// microsecond, checked in the same atomic store operation as the rule, which stays the
// authority. From idle b requests go at once, then one every T: under a long batch each window
// holds L − b + 1 (31 of 60 for 60 per minute), half the throughput of plain pacing. A burst
// larger than b is refused with strategy.ErrBurstTooLarge. App rules are not smoothed. It
// needs a rolling-window strategy; every store of this module keeps the GCRA.
// See docs/pacing.md#spread-a-batch-out-smoothing.
func WithSmoothing() Option {
	return func(t *Transport) error {
		t.pace.smooth = true
		return nil
	}
}

// applySmoothing replaces the Transport's strategy with its smoothed form (WithSmoothing).
func (t *Transport) applySmoothing() error {
	if !t.pace.smooth {
		return nil
	}
	s, err := t.strat.Smoothed()
	if err != nil {
		return fmt.Errorf("ratemonitor: WithSmoothing: %w", err)
	}
	t.strat = s
	return nil
}

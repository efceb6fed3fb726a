package ratemonitor

import "fmt"

// WithSmoothing makes the Transport spread a key's requests out instead of letting them take
// the whole allocation at once: beside every rule (effective limit L, effective window W) a
// GCRA with burst b = ⌈L/2⌉ and emission interval T = W/(L − b + 1) (rounded up to the
// microsecond) is kept in the key's state and checked in the same atomic store operation as
// the rule. The rule stays the authority: a request goes only when the rule and its GCRA both
// admit it, and the wait is the longer of the two. So from idle b requests go at once, after
// that one every T; under a long batch each window holds L − b + 1 requests (31 of 60 for 60
// per minute), which leaves about half the allocation to other callers, and halves the
// batch's throughput after its first window (use the plain pacer for batches that must finish
// fast). With 60/min and 5000/day both rules are smoothed: the day's GCRA (b = 2500, T ≈
// 34.5 s) paces a batch once half the day's allocation is spent. See
// engine.Strategy.Smoothed.
//
// Smoothing applies to everything that waits or reserves: paced RoundTrips (WithPacing),
// Reserve, Wait, WaitTime and WaitSeconds; a burst larger than b is refused with
// strategy.ErrBurstTooLarge. Reservation.Cancel refunds the GCRA too (n·T), unless the slots
// were reserved more than b·T ago, by when the GCRA has forgotten them. A charge partly paid
// off (reserved less than b·T ago but more than n·T) is refunded whole, so just after such a
// Cancel up to n·T more of a burst may go than b: the rule itself is never exceeded (it stays
// the authority). Monitoring-mode
// records charge the GCRA up to a full burst. App rules (WithAppRules) are not smoothed.
// AllocationUsed reports the rules' own usage.
//
// Every store of this module holds it: the memory store, the Redis store (its script keeps the
// GCRA's theoretical arrival time in the key's value, on Redis TIME), the SQLite and DynamoDB
// stores (which keep it as one more counter). A store that cannot is refused by New. It
// needs a rolling-window strategy (WithRules, or WithStrategy of rollingwindow.New).
func WithSmoothing() Option {
	return func(t *Transport) error {
		t.smooth = true
		return nil
	}
}

// applySmoothing replaces the Transport's strategy with its smoothed form (WithSmoothing).
func (t *Transport) applySmoothing() error {
	if !t.smooth {
		return nil
	}
	s, err := t.strat.Smoothed()
	if err != nil {
		return fmt.Errorf("ratemonitor: WithSmoothing: %w", err)
	}
	t.strat = s
	return nil
}

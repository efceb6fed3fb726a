package engine

import (
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Without returns the strategy of the rules of s whose counters skip does not name: what is left
// to count on a key when another layer (a Transport wrapping this one, over the same store) has
// already counted the others for the same attempt. It returns s itself when skip names none of
// its counters, and nil when it names them all. skip is called once per slot with the slot's
// counter ID.
func (s *Strategy) Without(skip func(id string) bool) *Strategy {
	var keep []strategy.Rule
	for i, r := range s.rules {
		if !skip(s.ids[s.slotOf[i]]) {
			keep = append(keep, r)
		}
	}
	switch len(keep) {
	case len(s.rules):
		return s
	case 0:
		return nil
	}
	sub, err := New(s.alg, keep...)
	if err != nil {
		// Unreachable: every rule passed New's checks when s was made, and they do not depend
		// on the other rules.
		return s
	}
	return s.smoothed(sub)
}

// Family returns the name of the limit rule i (in the order given to New) enforces, whatever its
// margin, granularity and headroom: the counter ID the algorithm gives the rule's limit and
// window alone. Two rules of one family kept in different counters (a different margin or
// granularity) count separately, so together they would let through more than either allows;
// ratemonitor.New and middleware.New refuse such pairs on one store (cache.ErrCounterConflict).
func (s *Strategy) Family(i int) string {
	r := s.rules[i]
	return s.alg.CounterID(strategy.Rule{Limit: r.Limit, Window: r.Window})
}

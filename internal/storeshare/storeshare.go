// Package storeshare holds cache.Sharing: the state that the Transports and middleware
// Limiters over one store value keep in that value (how many Transports use it, and the
// counter claims behind cache.ErrCounterConflict). It is internal so that its methods, which
// only those packages call, are no part of the public API; cache names the type.
package storeshare

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// ErrCounterConflict is cache.ErrCounterConflict (documented there), declared here so that
// Claim can wrap it without an import cycle.
var ErrCounterConflict = errors.New("ratemonitor: rules of the same window cannot share one count")

// Sharing is cache.Sharing. Its zero value is ready; it must not be copied once used.
//
// What it keeps is allocated on first use, apart from the store value that holds the Sharing:
// a Transport's garbage-collection cleanup holds the count (Join), and must not keep the store
// alive, since a store can hold what holds the Transport (an observer that refers to it), and
// the cleanup would then never run.
type Sharing struct {
	once sync.Once
	st   *state
}

type state struct {
	users Users
	mu    sync.Mutex
	// claims holds, per scope (see Claim) and per family of rules (engine.Strategy.Family),
	// the counter IDs every strategy claimed so far keeps that family in: their intersection,
	// so that one counter holds the requests of all of them.
	claims map[string]map[string]claim
}

type claim struct {
	ids  map[string]bool
	rule strategy.Rule // a rule of the first strategy, for the error message
}

func (s *Sharing) state() *state {
	s.once.Do(func() { s.st = new(state) })
	return s.st
}

// Users counts the Transports over one store value.
type Users struct{ n atomic.Int32 }

// Join counts one more Transport over the store, until it calls Leave on what Join returned.
func (s *Sharing) Join() *Users {
	u := &s.state().users
	u.n.Add(1)
	return u
}

// Leave uncounts a Transport that joined.
func (u *Users) Leave() { u.n.Add(-1) }

// Shared reports whether more than one Transport is counted.
func (u *Users) Shared() bool { return u.n.Load() > 1 }

// Claim checks that st counts each of its limits in a counter shared with every strategy
// already claimed on this store value for the same scope, and claims them. The scope is ""
// for strategies used on any key (a Transport's rules, a middleware Limiter's), or one key
// that only st is used on (an app key, a meter's keys): rules kept on keys that never meet
// cannot split a count. Within one strategy, rules of one family may differ (a request is
// recorded in every counter of its strategy). It returns an error wrapping
// ErrCounterConflict, naming both rules, when st would split a count; nothing is claimed then.
func (s *Sharing) Claim(scope string, st *engine.Strategy) error {
	mine := map[string]map[string]strategy.Rule{} // family -> counter ID -> rule
	for i := range st.NumRules() {
		f := st.Family(i)
		if mine[f] == nil {
			mine[f] = map[string]strategy.Rule{}
		}
		mine[f][st.CounterID(st.SlotOf(i))] = st.Rule(i)
	}
	sh := s.state()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	have := sh.claims[scope]
	for f, ids := range mine {
		c, ok := have[f]
		if !ok {
			continue
		}
		shared := false
		var r strategy.Rule
		for cid, rule := range ids {
			r = rule
			if c.ids[cid] {
				shared = true
				break
			}
		}
		if !shared {
			return fmt.Errorf("%w: rule %s and rule %s, already used on this store, would be counted separately "+
				"(their margin or granularity differ) and together let through up to twice the limit; "+
				"give both the same Margin and Granularity, or give them separate stores (for Redis, a prefix of their own)", ErrCounterConflict, r, c.rule)
		}
	}
	if sh.claims == nil {
		sh.claims = map[string]map[string]claim{}
	}
	if have == nil {
		have = map[string]claim{}
		sh.claims[scope] = have
	}
	for f, ids := range mine {
		c, ok := have[f]
		if !ok {
			c = claim{ids: map[string]bool{}}
			for cid, rule := range ids {
				c.ids[cid], c.rule = true, rule
			}
			have[f] = c
			continue
		}
		for cid := range c.ids {
			if _, ok := ids[cid]; !ok {
				delete(c.ids, cid)
			}
		}
	}
	return nil
}

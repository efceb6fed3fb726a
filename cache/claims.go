package cache

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// ErrCounterConflict is wrapped by ClaimCounters (and so by ratemonitor.New and middleware.New)
// when a strategy would count a limit in another counter than a strategy already used on the
// same store: two rules of the same window (for the token bucket: the same window and limit)
// that differ in margin or granularity. Each would count only its own requests, so together
// they would let through up to twice the limit. Give both the same Margin and Granularity, or
// give them separate stores (for Redis, a prefix of their own).
var ErrCounterConflict = errors.New("ratemonitor: rules of the same window cannot share one count")

// Namespacer is implemented by stores whose state lives outside the process and can be reached
// through more than one store value (of this repository's stores, only the Redis store):
// Namespace names where, such as "redis 127.0.0.1:6379 prefix rm:", so that two store values
// over the same state are one store to ClaimCounters and SameStore. The SQLite and DynamoDB
// stores do not implement it: each of their values is a store of its own to both.
type Namespacer interface {
	Namespace() string
}

// claims holds, per store and per family of rules (engine.Strategy.Family), the counter IDs
// every strategy used with that store so far keeps that family in: their intersection, so that
// one counter holds the requests of all of them.
var claims struct {
	mu sync.Mutex
	m  map[claimScope]map[string]claim
}

// claimScope is a store and a scope of ClaimCounters.
type claimScope struct {
	store any
	scope string
}

type claim struct {
	ids  map[string]bool
	rule strategy.Rule // a rule of the first strategy, for the error message
}

// ClaimCounters checks that s counts each of its limits in a counter shared with every strategy
// already claimed on st in this process for the same scope, and claims them. The scope is ""
// for strategies used on any key (a Transport's rules, a middleware Limiter's), or one key that
// only s is used on (a Transport's app key, ratemonitor.WithAppRules): rules kept on keys that
// never meet cannot split a count. Within one strategy, rules of one family may differ (a
// request is recorded in every counter of its strategy). It returns an error wrapping
// ErrCounterConflict, naming both rules, when s would split a count; nothing is claimed then. A
// store that is neither comparable nor a Namespacer is not checked.
//
// Claims last as long as the store: the memory store and the Redis store forget them on Close
// (ReleaseClaims), the others keep them for the life of the process. The check covers the strategies of one process; processes sharing
// a store must be given the same rules.
func ClaimCounters(st Store, scope string, s *engine.Strategy) error {
	sid, ok := storeIdentity(st)
	if !ok {
		return nil
	}
	id := claimScope{store: sid, scope: scope}
	mine := map[string]map[string]strategy.Rule{} // family -> counter ID -> rule
	for i := range s.NumRules() {
		f := s.Family(i)
		if mine[f] == nil {
			mine[f] = map[string]strategy.Rule{}
		}
		mine[f][s.CounterID(s.SlotOf(i))] = s.Rule(i)
	}
	claims.mu.Lock()
	defer claims.mu.Unlock()
	have := claims.m[id]
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
	if claims.m == nil {
		claims.m = map[claimScope]map[string]claim{}
	}
	if have == nil {
		have = map[string]claim{}
		claims.m[id] = have
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

// ReleaseClaims forgets the claims made on st, and on every store with its Namespace: for a
// store's Close, so that a later store at the same address and prefix (a server restarted on
// the port, another test's) starts afresh. Closing one of two Store values over one Namespace
// therefore drops the check for both; it never refuses what it did not before.
func ReleaseClaims(st Store) {
	if id, ok := storeIdentity(st); ok {
		claims.mu.Lock()
		for k := range claims.m {
			if k.store == id {
				delete(claims.m, k)
			}
		}
		claims.mu.Unlock()
	}
}

// storeIdentity returns what makes two stores one for ClaimCounters. A store is its own
// identity only when its value can be compared: the value's, not its type's (a struct wrapping
// a Store interface is of a comparable type, yet comparing or hashing it panics when the store
// inside is not comparable).
func storeIdentity(st Store) (any, bool) {
	if n, ok := st.(Namespacer); ok {
		return "ns:" + n.Namespace(), true
	}
	if st == nil || !reflect.ValueOf(st).Comparable() {
		return nil, false
	}
	return st, true
}

// SameStore reports whether a and b keep their state in the same place: the same store value,
// or stores whose Namespace is the same.
func SameStore(a, b Store) bool {
	ia, ok := storeIdentity(a)
	if !ok {
		return false
	}
	ib, ok := storeIdentity(b)
	return ok && ia == ib
}

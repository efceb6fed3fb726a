package ratemonitor

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// The limits a Transport made without rules knows are written to the store (cache.Syncer's
// PutLimits), so that every Transport over it paces on them: a key's learned meters when an
// answer changes them, and the meters SetMeter set. Each Transport reads them on a key's first
// request and again every limitsRefresh. The newest value wins, by the writer's clock.
const (
	limitsPrefix  = "limits\x00"        // + the request key: its learned meters
	setLimitsKey  = "limits\x00\x00set" // the meters SetMeter set, for every key
	limitsRefresh = 10 * time.Second    // how often a Transport reads them again
	learnedTTL    = 24 * time.Hour      // how long learned meters stay unless learned again
	sharedOp      = "shared"            // observe.LimitChanged's Op for limits read from the store
)

// storedLimits is the value written: when the writer changed them, and the meters.
type storedLimits struct {
	At     int64         `json:"at"` // Unix ns, on the writer's clock
	Meters []storedMeter `json:"meters"`
}

// storedMeter is a meter's figures; a set meter's Key and Cost functions stay in the process
// that set it.
type storedMeter struct {
	Name      string          `json:"name"`
	Key       string          `json:"key,omitempty"` // a learned meter's key; a set meter's AppKey
	Unit      string          `json:"unit,omitempty"`
	Rules     []strategy.Rule `json:"rules,omitempty"`
	InFlight  int             `json:"inflight,omitempty"`
	Partition string          `json:"pk,omitempty"`
}

// limitsStore returns the store that shares limits; nil when there is none (no cache.Syncer).
func (t *Transport) limitsStore() cache.Syncer {
	s, _ := t.store.(cache.Syncer)
	return s
}

// putLearned writes key's learned meters, as lk holds them, changed at now.
func (t *Transport) putLearned(req *http.Request, key string, lk *learnedKey, now time.Time) {
	s := t.limitsStore()
	if s == nil {
		return
	}
	l := t.sync.learn
	l.mu.Lock()
	// Strictly after the last change known here: two changes in one clock tick stay ordered.
	v := storedLimits{At: max(now.UnixNano(), after(lk.at))}
	for _, m := range lk.meters {
		v.Meters = append(v.Meters, storedMeter{Name: m.name, Key: m.key, Unit: m.unit, Rules: m.rules, InFlight: m.inflight, Partition: m.partition})
	}
	lk.at = v.At
	l.mu.Unlock()
	b, err := json.Marshal(v)
	if err == nil {
		err = s.PutLimits(context.WithoutCancel(req.Context()), limitsPrefix+key, b, learnedTTL)
	}
	if err != nil {
		t.syncFailed(req, key, err)
	}
}

// putSet writes the meters SetMeter set, as l holds them, changed at at.
func (t *Transport) putSet(ctx context.Context, at int64) error {
	s := t.limitsStore()
	if s == nil {
		return nil
	}
	l := t.sync.learn
	l.mu.Lock()
	v := storedLimits{At: at}
	for _, m := range l.set {
		v.Meters = append(v.Meters, storedMeter{Name: m.name, Key: m.spec.AppKey, Rules: m.rules, InFlight: m.inflight})
	}
	l.mu.Unlock()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.PutLimits(ctx, setLimitsKey, b, 0)
}

// loadLimits reads what the store holds for key (and the set meters, when due) into lk and l.
// The first call for a key (first) reads at once; later ones every limitsRefresh, one request
// at a time. A store error is logged and leaves what this process knows.
func (t *Transport) loadLimits(req *http.Request, key string, lk *learnedKey, first bool) {
	s := t.limitsStore()
	if s == nil {
		return
	}
	now := t.clock.Now().UnixNano()
	l := t.sync.learn
	if next := l.setNext.Load(); due(now, next) && l.setNext.CompareAndSwap(next, now+int64(limitsRefresh)) {
		t.loadSet(req, s)
	}
	next := lk.next.Load()
	if !first && !due(now, next) || !lk.next.CompareAndSwap(next, now+int64(limitsRefresh)) {
		return
	}
	b, err := s.Limits(req.Context(), limitsPrefix+key)
	if err != nil {
		if first {
			lk.next.Store(0) // read again on the key's next request
		}
		if req.Context().Err() == nil {
			t.syncFailed(req, key, err)
		}
		return
	}
	v, ok := t.decodeLimits(b)
	if !ok {
		return
	}
	var changed []*liveMeter
	l.mu.Lock()
	if v.At > lk.at {
		lk.at = v.At
		var ms []*liveMeter
		for _, sm := range v.Meters {
			if !sm.valid() || len(ms) == maxMeters || slices.ContainsFunc(ms, func(m *liveMeter) bool { return m.name == sm.Name }) {
				continue
			}
			i := slices.IndexFunc(lk.meters, func(m *liveMeter) bool { return m.name == sm.Name })
			m := &liveMeter{meter: meter{name: sm.Name, key: sm.Key}, unit: sm.Unit, rules: sm.Rules, inflight: sm.InFlight, partition: sm.Partition}
			if i >= 0 && lk.meters[i].key == sm.Key && lk.meters[i].same(m) {
				ms = append(ms, lk.meters[i])
				continue
			}
			if m = t.newLearned(sm.Name, sm.Key, sm.Unit, sm.Partition, sm.Rules, sm.InFlight); m == nil {
				continue
			}
			m.source = sharedOp
			ms = append(ms, m)
			changed = append(changed, m)
		}
		lk.meters = ms
	}
	if len(lk.meters) > 0 {
		lk.known = true // the store held state: the first-answer gate is open
		if lk.settled != nil && lk.unmetered == 0 {
			close(lk.settled)
			lk.settled = nil
		}
	}
	l.mu.Unlock()
	for _, m := range changed {
		t.limitChanged(m.keyFor(key), m)
	}
}

// loadSet reads the set meters from s and, when newer than l's, sets them here.
func (t *Transport) loadSet(req *http.Request, s cache.Syncer) {
	b, err := s.Limits(req.Context(), setLimitsKey)
	if err != nil {
		if req.Context().Err() == nil {
			t.syncFailed(req, "", err)
		}
		return
	}
	v, ok := t.decodeLimits(b)
	l := t.sync.learn
	l.mu.Lock()
	old, newer := l.set, ok && v.At > l.setAt
	l.mu.Unlock()
	if !newer {
		return
	}
	set := t.buildSet(v.Meters, old, sharedOp)
	l.mu.Lock()
	if newer = v.At > l.setAt; newer {
		l.setAt, l.set = v.At, set
	}
	l.mu.Unlock()
	if newer {
		for _, m := range set {
			t.limitChanged(m.spec.AppKey, m)
		}
	}
}

// buildSet returns the set meters stored describes (the first of a name, at most maxMeters),
// reported with Op source: a meter local sets under the same name keeps its Key and Cost
// functions; one this process cannot keep (no leases for its slots, say) is left out.
func (t *Transport) buildSet(stored []storedMeter, local []*liveMeter, source string) []*liveMeter {
	var set []*liveMeter
	for _, sm := range stored {
		if len(set) == maxMeters || slices.ContainsFunc(set, func(m *liveMeter) bool { return m.name == sm.Name }) {
			continue
		}
		spec := Meter{Name: sm.Name, AppKey: sm.Key}
		if i := slices.IndexFunc(local, func(m *liveMeter) bool { return m.name == sm.Name }); i >= 0 {
			spec = local[i].spec
		}
		spec.Rules, spec.InFlight = sm.Rules, sm.InFlight
		if m, err := t.setMeter(spec, source); err == nil {
			set = append(set, m)
		}
	}
	return set
}

// decodeLimits decodes a stored value; false when there is none, it is not one, or it is
// dated more than limitsAhead past this Transport's clock (a writer's clock that far ahead,
// or a value no Transport wrote, would otherwise stay the newest for good).
func (t *Transport) decodeLimits(b []byte) (storedLimits, bool) {
	var v storedLimits
	if b == nil || json.Unmarshal(b, &v) != nil {
		return v, false
	}
	return v, v.At <= t.clock.Now().Add(limitsAhead).UnixNano()
}

// limitsAhead is how far past this clock a stored value's date may be.
const limitsAhead = time.Hour

// after returns the instant just after x, Unix ns (x itself at the end of time).
func after(x int64) int64 {
	if x == math.MaxInt64 {
		return x
	}
	return x + 1
}

// errNotShared wraps a store error of SetMeter: the meter is set in this process only.
var errNotShared = errors.New("ratemonitor: SetMeter: the meter is set in this process, but the store could not share it")

// due reports whether a read planned for next (Unix ns) is due at now: its time has come, or
// the clock stepped back past a refresh interval (else it would wait for the clock's return).
func due(now, next int64) bool {
	return now >= next || next-now > int64(limitsRefresh)
}

// valid reports whether a stored learned meter is one a Transport could have learned: a unit
// of draft-11's or a cost report's, and rules, or a positive in-flight limit for concurrent requests.
func (sm storedMeter) valid() bool {
	switch sm.Unit {
	case unitReport:
		return len(sm.Rules) == 1 && sm.InFlight == 0 && sm.Partition == "" && (sm.Name != reportRequests || sm.Key == "")
	case unitRequests, unitBytes:
		return len(sm.Rules) > 0 && sm.InFlight == 0
	case unitConcurrent:
		return len(sm.Rules) == 0 && sm.InFlight > 0
	}
	return false
}

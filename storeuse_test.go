package ratemonitor

import (
	"context"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/observe"
)

// A Transport alone on its store passes the request itself to its base; once another Transport
// uses the same store, it passes a marked copy, so that a Transport further in over that store
// (directly, or behind any RoundTripper) counts the attempt only where this one did not.
func TestMarkOnlyWhenStoreShared(t *testing.T) {
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	base := &recorder{resp: &http.Response{StatusCode: 200}}
	outer, err := New(base, WithRules(minute), WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	if _, err := outer.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if base.got != req {
		t.Fatal("alone on its store: the base got a copy of the request, want the request itself")
	}
	// Another Transport over the store, made later (a RoundTripper whose next hop changes at
	// run time could put it under outer): outer marks from now on.
	other, err := New(nil, WithRules(minute), WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := outer.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if base.got == req || markFrom(base.got.Context()) == nil {
		t.Fatal("store shared: the base got no marked copy of the request")
	}
	// Through a net/http Transport, never one of ours, nothing is marked either way.
	if outer.needsMark(&http.Transport{}) {
		t.Error("needsMark through an *http.Transport")
	}
	// A Transport over another store is not counted with them.
	mem2, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem2.Close()
	third, err := New(base, WithRules(minute), WithStore(mem2))
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if third.needsMark(base) {
		t.Error("a Transport alone on another store marks its attempts")
	}
	runtime.KeepAlive(other)
}

// The default memory store New makes is shared once a Transport is made over it
// (WithStore(t.Store())): both mark then, and the attempt is counted once.
func TestMarkOwnStoreShared(t *testing.T) {
	inner, err := New(nil, WithRules(minute))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	if inner.needsMark(noop{}) {
		t.Fatal("alone on the store New made: marks")
	}
	outer, err := New(inner, WithRules(minute), WithStore(inner.Store()))
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	if !inner.needsMark(noop{}) || !outer.needsMark(noop{}) {
		t.Fatal("two Transports over one store: not marking")
	}
}

// A Transport alone on its store counts in full a request whose context carries a mark of that
// store (a context kept from an attempt made while the store was shared, whose Transports are
// gone): no live Transport further out counted it, so skipping the mark is an exact count where
// taking it would leave the request uncounted.
func TestStaleMarkCountedInFull(t *testing.T) {
	tr := newTransport(t, noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute))
	stale := &countMark{Context: context.Background(), store: tr.Store()}
	stale.counted = append(stale.inline[:0], countedOn{key: "api.example.com", strat: tr.strat})
	req, _ := http.NewRequestWithContext(stale, http.MethodGet, "https://api.example.com/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got := usedOf(t, tr, "api.example.com"); got[0] != 1 {
		t.Errorf("used %v after one request carrying a stale mark, want 1", got)
	}
}

// A Transport that is garbage collected no longer counts on its store: the one left alone goes
// back to passing the request as it is, and the count is forgotten with the last Transport.
func TestStoreUseLeavesWithGC(t *testing.T) {
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	kept, err := New(noop{}, WithRules(minute), WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		other, err := New(nil, WithRules(minute), WithStore(mem))
		if err != nil {
			t.Fatal(err)
		}
		other.Close()
	}()
	if !kept.needsMark(noop{}) {
		t.Fatal("two Transports over one store: not marking")
	}
	collected := func(done func() bool) bool {
		// Cleanups run on a goroutine of their own after a GC: give it time, generously.
		for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			runtime.GC()
			if done() {
				return true
			}
		}
		return false
	}
	if !collected(func() bool { return !kept.needsMark(noop{}) }) {
		t.Fatal("the other Transport was collected (or should have been), and kept still marks")
	}
	id, _ := storeIdentity(mem)
	kept.Close()
	kept = nil
	if !collected(func() bool {
		storeUses.mu.Lock()
		defer storeUses.mu.Unlock()
		return storeUses.m[id] == nil
	}) {
		t.Error("the store's count outlives its last Transport")
	}
}

// selfObserver is an observer that keeps its Transport (to read its Status on a refusal, say).
type selfObserver struct{ t *Transport }

func (*selfObserver) Observe(observe.Event) {}

// Guards storeuse.go's count holding no strong reference to a store: the memory store New makes
// holds the observer, and an observer holding its Transport closed a loop from the count's
// global map, so that a closed, unreferenced Transport was never collected (its cleanups never
// ran, its count never left).
func TestClosedTransportCollectedWithSelfObserver(t *testing.T) {
	var collected atomic.Int32
	func() {
		o := &selfObserver{}
		tr, err := New(nil, WithRules(minute), WithObserver(o))
		if err != nil {
			t.Fatal(err)
		}
		o.t = tr
		runtime.AddCleanup(tr, func(c *atomic.Int32) { c.Add(1) }, &collected)
		tr.Close()
	}()
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		runtime.GC()
		if collected.Load() == 1 {
			return
		}
	}
	t.Error("a closed, unreferenced Transport whose observer refers to it was not collected")
}

// storeIdentity, which the count of Transports per store is keyed by, agrees with
// cache.SameStore.
func TestStoreIdentityAgreesWithSameStore(t *testing.T) {
	m1, _ := cache.NewMemory(cache.MemoryConfig{})
	m2, _ := cache.NewMemory(cache.MemoryConfig{})
	defer m1.Close()
	defer m2.Close()
	n1, n2 := &noopStore{}, &noopStore{}
	stores := []cache.Store{m1, m2, n1, n2, named{ns: "redis a"}, named{ns: "redis a"}, named{ns: "redis b"}, unnamed{f: func() {}}}
	for _, a := range stores {
		for _, b := range stores {
			ia, oka := storeIdentity(a)
			ib, okb := storeIdentity(b)
			same := oka && okb && ia == ib
			if same != cache.SameStore(a, b) {
				t.Errorf("%T %v vs %T %v: identity says same=%v, cache.SameStore %v", a, a, b, b, same, !same)
			}
		}
	}
}

// named is a store known by its namespace (as the Redis store is), unnamed one that is neither
// a Namespacer nor comparable.
type (
	named struct {
		*noopStore
		ns string
	}
	unnamed struct {
		*noopStore
		f func()
	}
)

func (n named) Namespace() string { return n.ns }

// byValue is a user's store wrapper passed by value: its type is comparable, its value is not
// when the store it wraps is not (unnamed has a func field).
type byValue struct{ cache.Store }

// Guards the value-level comparability check (cache.storeIdentity, storeIdentity): a type that
// says comparable can hold a value whose comparison panics. Before the fix New panicked, in
// cache.ClaimCounters and then joinStoreUse.
func TestStoreWrapperOfUncomparableStoreAccepted(t *testing.T) {
	st := byValue{unnamed{noopStore: &noopStore{}, f: func() {}}}
	if cache.SameStore(st, st) {
		t.Error("cache.SameStore of a store that cannot be compared: true, want false")
	}
	tr, err := New(noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute), WithStore(st))
	if err != nil {
		t.Fatalf("New over a by-value wrapper of a store that cannot be compared: %v", err)
	}
	defer tr.Close()
	if tr.alwaysMark || tr.use != nil {
		t.Errorf("a store that is the same as no other: alwaysMark %v, counted %v; want neither", tr.alwaysMark, tr.use != nil)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	// A by-value wrapper of a comparable store has no key in the count (it holds no pointer
	// of its own to key a weak reference by): its Transports mark every attempt.
	tr2, err := New(noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute), WithStore(byValue{&noopStore{}}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	if !tr2.alwaysMark {
		t.Error("a comparable store passed by value: alwaysMark false, want true")
	}
}

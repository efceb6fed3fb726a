package ratemonitor

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// The Transport's own work on the common path (no mark from a Transport further out, no
// Reservation, no WithCost or WithCostReport, no app rules, no in-flight limit, a store no other
// Transport uses) allocates nothing: no charge on the heap, no request copy, no context; nor
// does learning from a response without rate-limit fields (WithSync). Over a
// store that allocates nothing itself (noopStore, bench_test.go), so that the figure is the
// Transport's whatever the memory store's is.
func TestRoundTripAllocs(t *testing.T) {
	rules := []strategy.Rule{
		{Limit: 1 << 30, Window: time.Minute, Margin: time.Second},
		{Limit: 1 << 30, Window: 24 * time.Hour},
	}
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"monitor", nil},
		{"paced", []Option{WithPacing()}},
		{"monitor/SendNothing", []Option{WithStoreErrorPolicy(SendNothing)}},
		{"paced/SendUncounted", []Option{WithPacing(), WithStoreErrorPolicy(SendUncounted)}},
		// The response carries no rate-limit field: the default readers find nothing, and
		// nothing is kept.
		{"monitor/sync", []Option{WithSync(SyncConfig{})}},
		{"paced/sync", []Option{WithPacing(), WithSync(SyncConfig{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := noop{resp: &http.Response{StatusCode: 200}}
			opts := append([]Option{WithRules(rules...), WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)), WithStore(&noopStore{})}, tc.opts...)
			tr, err := New(base, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
			req.Header.Set("Xero-Tenant-Id", "tenant-1")
			got := testing.AllocsPerRun(1000, func() {
				if _, err := tr.RoundTrip(req); err != nil {
					t.Fatal(err)
				}
			})
			if got != 0 {
				t.Errorf("RoundTrip allocates %v times per request on the common path, want 0", got)
			}
		})
	}
}

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
		for range 200 {
			runtime.GC()
			if done() {
				return true
			}
			time.Sleep(time.Millisecond)
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

// storeIdentity, which the count of Transports per store is keyed by, agrees with
// cache.SameStore.
func TestStoreIdentity(t *testing.T) {
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

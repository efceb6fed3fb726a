package ratemonitor

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
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

// The count of Transports and the counter claims live in each store value (cache.Sharing):
// Transports stacked over one store count an attempt once, while another store's Transports
// neither mark because of them nor meet their claims, and count the attempt in their own store.
func TestSharingPerStoreValue(t *testing.T) {
	mem := func() *cache.Memory {
		m, err := cache.NewMemory(cache.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	a, b := mem(), mem()
	up := noop{resp: &http.Response{StatusCode: 200}}
	innerA := newTransport(t, up, WithRules(minute), WithStore(a))
	onB := newTransport(t, up, WithRules(minute), WithStore(b))
	if innerA.needsMark(noop{}) || onB.needsMark(noop{}) {
		t.Fatal("one Transport on each store: marks")
	}
	outerA := newTransport(t, innerA, WithRules(minute), WithStore(a))
	if !innerA.needsMark(noop{}) || !outerA.needsMark(noop{}) {
		t.Error("two Transports over store a: not marking")
	}
	if onB.needsMark(noop{}) {
		t.Error("the Transports over store a made the one alone on store b mark")
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	if _, err := outerA.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got := usedOf(t, innerA, "api.example.com"); got[0] != 1 {
		t.Errorf("stacked over one store: used %v after one request, want 1 (counted once)", got)
	}
	// Stacked over two stores, each counts the attempt in its own.
	outerB := newTransport(t, innerA, WithRules(minute), WithStore(b))
	if _, err := outerB.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if ua, ub := usedOf(t, innerA, "api.example.com"), usedOf(t, onB, "api.example.com"); ua[0] != 2 || ub[0] != 1 {
		t.Errorf("stacked over two stores: used %v on a and %v on b, want 2 and 1", ua, ub)
	}
	// Claims: a rule of the same window with another margin is refused on a, not on b.
	other := strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}
	if _, err := New(nil, WithRules(other), WithStore(a)); !errors.Is(err, cache.ErrCounterConflict) {
		t.Errorf("another margin on store a: %v, want ErrCounterConflict", err)
	}
	c := mem()
	newTransport(t, nil, WithRules(other), WithStore(c))
	if _, err := New(nil, WithRules(minute), WithStore(c)); !errors.Is(err, cache.ErrCounterConflict) {
		t.Errorf("the margins the other way round on store c: %v, want ErrCounterConflict", err)
	}
	newTransport(t, nil, WithRules(other), WithStore(mem()))
}

// foreign is a third-party store that says nothing of itself (no cache.Describer): it has no
// Sharing to count Transports in.
type foreign struct{ cache.Store }

// A Transport over a store without a Sharing marks every attempt (two allocations a request)
// since another Transport may be over it: stacked over one such store, an attempt is still
// counted once. Its rules are not checked (ErrCounterConflict needs a Sharing).
func TestStoreWithoutSharingMarksEveryAttempt(t *testing.T) {
	m, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st := &foreign{m}
	inner := newTransport(t, noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute), WithStore(st))
	if !inner.needsMark(noop{}) {
		t.Fatal("alone on a store without a Sharing: does not mark, want every attempt marked")
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	if allocs := testing.AllocsPerRun(100, func() { inner.RoundTrip(req) }); allocs < 2 {
		t.Errorf("a RoundTrip over a store without a Sharing allocates %v times, want the mark's 2 at least", allocs)
	}
	outer := newTransport(t, inner, WithRules(minute), WithStore(st))
	before := usedOf(t, inner, "api.example.com")[0]
	if _, err := outer.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got := usedOf(t, inner, "api.example.com")[0] - before; got != 1 {
		t.Errorf("stacked over one store without a Sharing: one request counted %d times, want 1", got)
	}
	newTransport(t, nil, WithRules(strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}), WithStore(st))
}

// Guards "no process-wide state": what Transports and Limiters keep about the stores
// they use lives in the store values (cache.Sharing). No package that keeps it has a
// package-level variable that a registry needs: a lock, a sync.Map, a weak pointer, a struct,
// or a map made empty to be filled (a literal lookup table is fine).
func TestNoProcessWideStoreState(t *testing.T) {
	for _, dir := range []string{".", "cache", "middleware", "internal/storeshare", "cache/redisstore", "cache/sqlitestore", "cache/dynamostore"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, sp := range g.Specs {
					vs := sp.(*ast.ValueSpec)
					if why := registryLike(vs); why != "" {
						t.Errorf("%s: package-level %s is %s: keep what is per store in the store value (cache.Sharing)", fset.Position(vs.Pos()), vs.Names[0].Name, why)
					}
				}
			}
		}
	}
}

// registryLike says what makes the variable vs look like a registry, or "".
func registryLike(vs *ast.ValueSpec) string {
	if _, ok := vs.Type.(*ast.StructType); ok {
		return "a struct"
	}
	var b strings.Builder
	if vs.Type != nil {
		printer.Fprint(&b, token.NewFileSet(), vs.Type)
	}
	for _, v := range vs.Values {
		switch v := v.(type) {
		case *ast.CallExpr: // make(...), new(...)
			if id, ok := v.Fun.(*ast.Ident); ok && (id.Name == "make" || id.Name == "new") {
				printer.Fprint(&b, token.NewFileSet(), v.Args[0])
			}
		case *ast.CompositeLit:
			if _, ok := v.Type.(*ast.StructType); ok {
				b.WriteString("struct")
			}
		}
	}
	typ := b.String()
	for _, s := range []string{"sync.", "weak.", "struct", "map["} {
		if strings.Contains(typ, s) {
			return "a " + typ
		}
	}
	return ""
}

// A Transport alone on its store counts in full a request whose context carries a mark of that
// store (a context kept from an attempt made while the store was shared, whose Transports are
// gone): no live Transport further out counted it, so skipping the mark is an exact count where
// taking it would leave the request uncounted.
func TestStaleMarkCountedInFull(t *testing.T) {
	tr := newTransport(t, noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute))
	stale := &countMark{Context: context.Background(), store: tr.share.id}
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
// back to passing the request as it is, and with the last one the count is back to zero (a new
// Transport over the store is alone there).
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
	kept.Close()
	kept = nil
	// One Transport more over the store is alone there only once kept has left the count.
	fresh, err := New(noop{}, WithRules(minute), WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if !collected(func() bool { return !fresh.needsMark(noop{}) }) {
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

// A mark is read by the Transports over the marking one's store only: the same store value,
// or a wrapper that gives its Sharing (cache.Traits); a store without a Sharing is compared by
// value when it can be, and is the same as no other when it cannot.
func TestStoreIDSameForOneStoreOnly(t *testing.T) {
	m1, _ := cache.NewMemory(cache.MemoryConfig{})
	m2, _ := cache.NewMemory(cache.MemoryConfig{})
	defer m1.Close()
	defer m2.Close()
	n1, n2 := &noopStore{}, &noopStore{}
	bare := &noopStore{}
	hidden := plainStore{bare} // hides Describe: no Sharing, compared by value
	stores := []cache.Store{m1, m2, n1, n2, described{n1}, hidden, plainStore{bare}, plainStore{n2}, unnamed{Store: bare, f: func() {}}}
	same := func(i, j int) bool {
		switch {
		case i == j:
			return i != len(stores)-1 // unnamed cannot be compared, even to itself
		case min(i, j) == 2 && max(i, j) == 4: // described{n1} gives n1's Sharing
			return true
		case min(i, j) == 5 && max(i, j) == 6: // equal values
			return true
		}
		return false
	}
	trs := make([]*Transport, len(stores))
	for i, st := range stores {
		trs[i] = newTransport(t, noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute), WithStore(st))
	}
	for i, a := range trs {
		for j, b := range trs {
			if got := a.sameStore(b.share.id); got != same(i, j) {
				t.Errorf("%T %v vs %T %v: sameStore %v, want %v", stores[i], stores[i], stores[j], stores[j], got, !got)
			}
		}
	}
}

// described is a wrapper that forwards its store's traits, as the conformance recorder does.
type described struct{ *noopStore }

// unnamed is a store that says nothing of itself (it hides its store's Describe) and cannot be
// compared.
type unnamed struct {
	cache.Store
	f func()
}

// byValue is a user's store wrapper passed by value: its type is comparable, its value is not
// when the store it wraps is not (unnamed has a func field).
type byValue struct{ cache.Store }

// Guards the value-level comparability check (joinStore): a type that says comparable can hold
// a value whose comparison panics. Before the fix New panicked, in the counter claims and then
// in the count of Transports per store.
func TestStoreWrapperOfUncomparableStoreAccepted(t *testing.T) {
	st := byValue{unnamed{Store: &noopStore{}, f: func() {}}}
	tr, err := New(noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute), WithStore(st))
	if err != nil {
		t.Fatalf("New over a by-value wrapper of a store that cannot be compared: %v", err)
	}
	defer tr.Close()
	if tr.sameStore(tr.share.id) {
		t.Error("a store that cannot be compared is the same as itself to its Transport, want the same as no other")
	}
	if tr.share.alwaysMark || tr.share.users != nil {
		t.Errorf("a store that is the same as no other: alwaysMark %v, counted %v; want neither", tr.share.alwaysMark, tr.share.users != nil)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	// A by-value wrapper of a comparable store has no Sharing (it hides its store's Describe):
	// its Transports mark every attempt.
	tr2, err := New(noop{resp: &http.Response{StatusCode: 200}}, WithRules(minute), WithStore(byValue{&noopStore{}}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	if !tr2.share.alwaysMark {
		t.Error("a comparable store passed by value: alwaysMark false, want true")
	}
}

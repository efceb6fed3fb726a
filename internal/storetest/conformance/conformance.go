// Package conformance is the suite every store runs (docs/reliability.md): a strict reference model
// (package storetest's Check and ModelUsed, every instant kept) judges each grant at the
// store's own instant, through every entry point (Reserve with 64 goroutines on one key,
// monitoring Record, middleware Admit, the paced Transport with 64 goroutines against an
// upstream, several OS processes), under every strategy, and under the faults the store has
// (stopped and restarted, paused, scripts flushed, clock stepped back and forward, a process
// killed), each under SendUncounted and SendNothing.
//
// A store's package runs it from its own test file with Run. It lives apart from package
// storetest because it imports ratemonitor and middleware, which import package cache, whose
// in-package tests use storetest.
package conformance

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// soak, when set, runs every part of the suite that long instead of its CI length, and the
// suite logs its figures (operations, faults, violations).
var soak = flag.Duration("conformance.soak", 0, "run each conformance case for this long (0: the short CI run)")

// Target is one store under test.
type Target struct {
	// Name names the store in reports: "memory", "redis", "sqlite", "dynamodb".
	Name string
	// Open returns a store reading its instants from clk, or from its own clock (real time)
	// when clk is nil. Stores one Target opens may share state: the suite uses a fresh key for
	// every case.
	Open func(t testing.TB, clk clock.Clock) Store
	// Stop and Start stop the store's server and start it again (nil: no such fault). State
	// may be lost across them.
	Stop, Start func(t testing.TB)
	// Pause stops the server answering for d (Redis CLIENT PAUSE); nil when it cannot.
	Pause func(t testing.TB, d time.Duration)
	// FlushScripts drops the server's cached scripts (Redis SCRIPT FLUSH); nil when none.
	FlushScripts func(t testing.TB)
	// Shared, when set, says the store can be shared by OS processes: it returns what a child
	// process needs to open the same store (an address, a path), and OpenShared opens it there.
	Shared     func(t testing.TB) string
	OpenShared func(t testing.TB, where string) Store
	// Slow divides the rounds of the manual-clock cases (reserve64, record64, admit64) for a
	// store whose every operation is slow (dynalite: a few ms): 0 or 1 runs them all.
	Slow int
}

// Strategies returns the strategies the suite runs on a manual clock, by algorithm name: two
// layered rules each, the second with a margin and headroom, so that effective windows and
// limits are what is judged.
func Strategies() []*engine.Strategy {
	return []*engine.Strategy{
		must(rollingwindow.New(
			strategy.Rule{Limit: 10, Window: time.Second, Granularity: 100 * time.Millisecond},
			strategy.Rule{Limit: 30, Window: 5 * time.Second, Granularity: 100 * time.Millisecond, Margin: 100 * time.Millisecond, Headroom: 5})),
		must(fixedwindow.New(
			strategy.Rule{Limit: 10, Window: time.Second},
			strategy.Rule{Limit: 30, Window: 5 * time.Second, Headroom: 5})),
		must(tokenbucket.New(
			strategy.Rule{Limit: 10, Window: time.Second},
			strategy.Rule{Limit: 30, Window: 5 * time.Second, Margin: 100 * time.Millisecond, Headroom: 5})),
	}
}

// realStrategies are the ones the real-time cases (Transport, processes, server faults) run:
// short windows, so that a CI run sees several of them.
func realStrategies() []*engine.Strategy {
	return []*engine.Strategy{
		must(rollingwindow.New(
			strategy.Rule{Limit: 10, Window: 500 * time.Millisecond, Granularity: 50 * time.Millisecond},
			strategy.Rule{Limit: 25, Window: 2 * time.Second, Granularity: 100 * time.Millisecond})),
		must(fixedwindow.New( // whole seconds: the SQLite store's fixed window wants them
			strategy.Rule{Limit: 10, Window: time.Second},
			strategy.Rule{Limit: 25, Window: 2 * time.Second})),
		must(tokenbucket.New(
			strategy.Rule{Limit: 10, Window: 500 * time.Millisecond},
			strategy.Rule{Limit: 25, Window: 2 * time.Second})),
	}
}

func must(s *engine.Strategy, err error) *engine.Strategy {
	if err != nil {
		panic(err) // the rules above are constants
	}
	return s
}

// liveWithin is how long past a key's longest window the real-time cases wait for it to admit
// again after a fault or a run (docs/reliability.md: within the longest window). That promise is
// asserted on the store's own answers: every wait it tells lies within the longest window
// (report.waitsInBounds), and the clock-step cases keep it on a manual clock; the real time a
// grant takes on a loaded machine (a reconnect, a late wake) is asserted only against this
// generous deadline: liveness, not a rate.
const liveWithin = 30 * time.Second

// t0 is where manual clocks start: a whole microsecond (Redis works in µs), inside no window's
// start.
var t0 = time.Date(2026, 12, 1, 0, 0, 0, 123456000, time.UTC)

var keySeq atomic.Int64

// totals are the figures of one Run, logged at its end (and by a soak): store operations the
// suite made through its recorder, grants the model judged, faults applied and violations found.
var totals struct {
	ops, judged, faults, violations atomic.Int64
}

// newKey returns a key no other case of this process uses, and unlikely to meet a key of an
// earlier run on a shared server.
func newKey(name string) string {
	return "conf-" + name + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-" + strconv.FormatInt(keySeq.Add(1), 10)
}

// dur returns d, or the soak length when soaking and it is longer.
func dur(d time.Duration) time.Duration {
	if *soak > d {
		return *soak
	}
	return d
}

// rounds returns n (divided by tg.Slow), or enough rounds to fill the soak length at about
// per each.
func rounds(tg Target, n int, per time.Duration) int {
	if *soak > 0 {
		return max(n, int(*soak/per))
	}
	return max(2, n/max(1, tg.Slow))
}

// Run runs the whole suite on tg. Each case is a subtest named
// "<entry point or fault>/<strategy>[/<policy>]".
func Run(t *testing.T, tg Target) {
	if childMode() {
		child(t, tg)
		return
	}
	ops, judged, nfaults, viol := totals.ops.Load(), totals.judged.Load(), totals.faults.Load(), totals.violations.Load()
	defer func() {
		t.Logf("conformance %s: %d store operations, %d grants judged by the model, %d faults applied, %d violations (soak %v)",
			tg.Name, totals.ops.Load()-ops, totals.judged.Load()-judged, totals.faults.Load()-nfaults, totals.violations.Load()-viol, *soak)
	}()
	for _, s := range Strategies() {
		if v := validate(tg, t, s); v != nil {
			t.Fatalf("%s refuses the suite's %s strategy: %v", tg.Name, s.Name(), v)
		}
	}
	t.Run("reserve64", func(t *testing.T) {
		forEach(t, Strategies(), func(t *testing.T, s *engine.Strategy) { reserve64(t, tg, s) })
	})
	t.Run("record64", func(t *testing.T) {
		forEach(t, Strategies(), func(t *testing.T, s *engine.Strategy) { record64(t, tg, s) })
	})
	t.Run("admit64", func(t *testing.T) {
		forEach(t, Strategies(), func(t *testing.T, s *engine.Strategy) { admit64(t, tg, s) })
	})
	t.Run("clockback", func(t *testing.T) {
		forEach(t, Strategies(), func(t *testing.T, s *engine.Strategy) { clockStep(t, tg, s, -time.Hour) })
	})
	t.Run("clockforward", func(t *testing.T) {
		forEach(t, Strategies(), func(t *testing.T, s *engine.Strategy) { clockStep(t, tg, s, 24*time.Hour) })
	})
	t.Run("transport64", func(t *testing.T) {
		forEach(t, realStrategies(), func(t *testing.T, s *engine.Strategy) { transport64(t, tg, s) })
	})
	t.Run("meters", func(t *testing.T) { meters(t, tg) })
	t.Run("stacked", func(t *testing.T) { stacked(t, tg) })
	t.Run("split", func(t *testing.T) { splitCount(t, tg) })
	t.Run("faults", func(t *testing.T) { faults(t, tg) })
	if tg.Shared != nil {
		t.Run("processes", func(t *testing.T) { processes(t, tg) })
	}
}

func forEach(t *testing.T, ss []*engine.Strategy, f func(*testing.T, *engine.Strategy)) {
	for _, s := range ss {
		t.Run(s.Name(), func(t *testing.T) { f(t, s) })
	}
}

func validate(tg Target, t testing.TB, s *engine.Strategy) error {
	st := tg.Open(t, clock.NewManual(t0))
	if v := (&recorder{Store: st}).Describe().Validate; v != nil {
		return v(s)
	}
	return nil
}

// report collects a case's failures, and fails the test with them when the case is done.
type report struct {
	mu    sync.Mutex
	t     *testing.T
	store string
	fails []string
	viol  int // model violations found
}

func newReport(t *testing.T, tg Target) *report { return &report{t: t, store: tg.Name} }

func (r *report) fail(format string, args ...any) {
	r.mu.Lock()
	r.fails = append(r.fails, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// done fails the test with every failure (the first 8, then how many more).
func (r *report) done() {
	r.t.Helper()
	for i, f := range r.fails {
		if i == 8 {
			r.t.Errorf("… and %d more failures", len(r.fails)-8)
			break
		}
		r.t.Error(f)
	}
	totals.violations.Add(int64(r.viol))
}

// violations judges grants with the model and fails the report for each violation (the first
// few named, and how many).
func (r *report) violations(what string, s *engine.Strategy, grants []Grant, slack time.Duration) int {
	r.t.Helper()
	v, err := Check(s, grants, slack)
	totals.judged.Add(int64(len(grants)))
	r.mu.Lock()
	r.viol += len(v)
	r.mu.Unlock()
	if err != nil {
		r.fail("%s: %v", what, err)
		return 0
	}
	for i, x := range v {
		if i == 3 {
			r.fail("%s: %d violations in all", what, len(v))
			break
		}
		r.fail("%s: %v", what, x)
	}
	return len(v)
}

// waitsInBounds fails the report for each wait outside [0, longest window + pause].
func (r *report) waitsInBounds(s *engine.Strategy, waits []time.Duration, pause time.Duration) {
	bad := 0
	for _, w := range waits {
		if w < 0 || w > s.Longest()+pause {
			if bad++; bad <= 3 {
				r.fail("wait %v outside [0, %v]", w, s.Longest()+pause)
			}
		}
	}
}

// ctx returns a context ended when the test ends.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

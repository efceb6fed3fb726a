package ratemonitor

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/optionscan"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// reuseCase is one option, made once and passed to several New calls: an Option is a value, and
// what one New does with it must not change what the next New gets.
type reuseCase struct {
	name string
	// make returns a new option; the test makes one and reuses it, and compares with fresh ones.
	make func() Option
	// a and b are two different sets of other options the option is combined with.
	a, b []Option
}

// reuseCases lists every exported option (TestReuseTableNamesEveryOption keeps it so). The first
// row is the new user's case: WithSync's defaults are Xero's minute and day readers, which must
// not stay in the option once a New with Xero's rules has filled them in.
func reuseCases(t *testing.T) []reuseCase {
	xero := WithRules(strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 5000, Window: 24 * time.Hour})
	perSecond := WithRules(strategy.Rule{Limit: 3, Window: time.Second})
	hour := WithRules(strategy.Rule{Limit: 5000, Window: time.Hour})
	mem, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	manual := clock.NewManual(time.Unix(1000, 0))
	app := WithAppRules("app", strategy.Rule{Limit: 100, Window: time.Minute})
	inFlight := WithInFlight(2)
	return []reuseCase{
		{"WithSync", func() Option { return WithSync(SyncConfig{}) }, []Option{xero}, []Option{perSecond}},
		{"WithSync/XRateLimitWindow", func() Option { return WithSync(SyncConfig{XRateLimitWindow: time.Hour}) }, []Option{hour}, []Option{hour, WithPacing()}},
		{"WithSync/Readers", func() Option {
			return WithSync(SyncConfig{Readers: []headers.Reader{headers.XRateLimitReader(time.Hour, headers.ResetEpoch)}})
		}, []Option{hour}, []Option{hour, WithPacing()}},
		{"WithRules", func() Option { return WithRules(strategy.Rule{Limit: 3, Window: time.Second}) }, nil, []Option{WithPacing(), WithSmoothing()}},
		{"WithStrategy", func() Option {
			s, err := rollingwindow.New(strategy.Rule{Limit: 3, Window: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return WithStrategy(s)
		}, nil, []Option{WithPacing(), WithSmoothing()}},
		{"WithAppRules", func() Option { return WithAppRules("app", strategy.Rule{Limit: 100, Window: time.Minute}) }, []Option{xero}, []Option{perSecond, WithPacing()}},
		{"WithMeter", func() Option {
			return WithMeter(Meter{Name: "points", Rules: []strategy.Rule{{Limit: 900, Window: time.Minute}}, Cost: func(*http.Request) int { return 5 }})
		}, []Option{hour}, []Option{perSecond, WithPacing()}},
		{"WithStore", func() Option { return WithStore(mem) }, []Option{xero}, []Option{xero, WithPacing()}},
		{"WithKeyFunc", func() Option { return WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)) }, []Option{xero}, []Option{perSecond}},
		{"WithClock", func() Option { return WithClock(manual) }, []Option{xero}, []Option{perSecond, WithPacing()}},
		{"WithStoreErrorPolicy", func() Option { return WithStoreErrorPolicy(SendNothing) }, []Option{xero}, []Option{perSecond, WithPacing()}},
		{"WithErrorHandler", func() Option { return WithErrorHandler(func(*http.Request, string, error) {}) }, []Option{xero}, []Option{perSecond}},
		{"WithLogger", func() Option { return WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))) }, []Option{xero}, []Option{perSecond}},
		{"WithObserver", func() Option { return WithObserver(observe.Func(func(observe.Event) {})) }, []Option{xero}, []Option{perSecond, WithPacing()}},
		{"WithCost", func() Option { return WithCost(func(*http.Request) int { return 2 }) }, []Option{xero}, []Option{perSecond, WithPacing()}},
		{"WithCostReport", func() Option { return WithCostReport(cost.GitHubGraphQL(time.Hour)) }, []Option{hour}, []Option{hour, WithPacing(), WithSync(SyncConfig{})}},
		{"WithDegraded", func() Option { return WithDegraded(DegradedConfig{Share: 0.5}) }, []Option{xero, WithPacing()}, []Option{perSecond}},
		{"WithInFlight", func() Option { return WithInFlight(2) }, []Option{xero}, []Option{perSecond, app, WithAppInFlight(3)}},
		{"WithAppInFlight", func() Option { return WithAppInFlight(3) }, []Option{xero, app}, []Option{perSecond, app, inFlight}},
		{"WithInFlightLease", func() Option { return WithInFlightLease(time.Second) }, []Option{xero, inFlight}, []Option{perSecond, app, WithAppInFlight(3)}},
		{"WithPacing", WithPacing, []Option{xero}, []Option{perSecond, WithStoreErrorPolicy(SendNothing)}},
		{"WithSmoothing", WithSmoothing, []Option{xero}, []Option{perSecond, WithPacing()}},
	}
}

// TestOptionReusedInManyNewCallsActsAsFresh passes each option to New three times, with two
// different sets of other options (a, b, a), and checks that every New does what it does with a
// fresh option: the same error, or a Transport set up the same way.
func TestOptionReusedInManyNewCallsActsAsFresh(t *testing.T) {
	for _, c := range reuseCases(t) {
		t.Run(c.name, func(t *testing.T) {
			reused := c.make()
			for i, others := range [][]Option{c.a, c.b, c.a, c.b} {
				got, gotErr := New(nil, append(append([]Option(nil), others...), reused)...)
				want, wantErr := New(nil, append(append([]Option(nil), others...), c.make())...)
				if got != nil {
					t.Cleanup(func() { got.Close() })
				}
				if want != nil {
					t.Cleanup(func() { want.Close() })
				}
				if gotErr != nil || wantErr != nil {
					t.Fatalf("New %d: reused option: %v; fresh option: %v; want both to succeed", i+1, gotErr, wantErr)
				}
				if g, w := setup(got), setup(want); g != w {
					t.Fatalf("New %d: the reused option set the Transport up as\n%s\nwant, as a fresh one does,\n%s", i+1, g, w)
				}
			}
		})
	}
}

// setup describes what the options set in tr, for comparing two Transports.
func setup(tr *Transport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules %v, pacing %v, smooth %v, policy %v, in flight %+v, clock set %v, cost %v, cost report %v, observer %v, error handler %v",
		tr.Rules(), tr.pace.on, tr.pace.smooth, tr.fail.policy, tr.setup.inflight, tr.setup.clockSet, tr.costs.fn != nil, tr.costs.report != nil, tr.obs != nil, tr.fail.onError != nil)
	if len(tr.meters) > 0 {
		fmt.Fprintf(&b, ", meter %s %q %v cost %v", tr.meters[0].name, tr.meters[0].key, tr.meters[0].strat.Rules(), tr.meters[0].cost != nil)
	}
	if tr.setup.degradedCfg != nil {
		fmt.Fprintf(&b, ", degraded %+v", *tr.setup.degradedCfg)
	}
	if s := tr.sync; s != nil {
		fmt.Fprintf(&b, ", sync: %d readers %v checked %v, xrl at %d, fallback %v, max pause %v", len(s.Readers), readerNames(s.Readers), s.checked, s.xrlAt, s.Fallback, s.MaxPause)
	}
	return b.String()
}

func readerNames(rs []headers.Reader) []string {
	var names []string
	for _, r := range rs {
		names = append(names, fmt.Sprintf("%T", r))
	}
	return names
}

// TestReuseTableNamesEveryOption reads the package's source and fails when an exported function
// returning an Option is missing from reuseCases: a new option must be shown reusable too.
func TestReuseTableNamesEveryOption(t *testing.T) {
	options, err := optionscan.Constructors(".", "Option")
	if err != nil {
		t.Fatal(err)
	}
	if len(options) < 19 {
		t.Fatalf("found %d options (%v): the source scan is broken", len(options), options)
	}
	listed := map[string]bool{}
	for _, c := range reuseCases(t) {
		listed[strings.SplitN(c.name, "/", 2)[0]] = true
	}
	for _, o := range options {
		if !listed[o] {
			t.Errorf("option %s is not in reuseCases: add a row that passes it to two New calls", o)
		}
	}
}

// TestVariadicOptionKeepsItsArguments: an option made from a slice holds a copy of it, so a
// caller who changes or reuses the slice afterwards does not change the option.
func TestVariadicOptionKeepsItsArguments(t *testing.T) {
	rules := []strategy.Rule{{Limit: 3, Window: time.Second}}
	appRules := []strategy.Rule{{Limit: 100, Window: time.Minute}}
	opts := []Option{WithRules(rules...), WithAppRules("app", appRules...)}
	rules[0], appRules[0] = strategy.Rule{}, strategy.Rule{} // not valid rules
	tr, err := New(nil, opts...)
	if err != nil {
		t.Fatalf("New after the caller cleared its slices: %v; want the rules the options were made with", err)
	}
	defer tr.Close()
	if got, want := fmt.Sprint(tr.Rules(), tr.meters[0].strat.Rules()), "[3/1s] [100/1m0s]"; got != want {
		t.Errorf("rules %s, want %s", got, want)
	}
}

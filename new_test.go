package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestNewRefusesBadOptions: New returns an error, and no Transport, for options it cannot
// follow (TestNewErrorsNameTheOption: what the error says).
func TestNewRefusesBadOptions(t *testing.T) {
	cases := map[string][]Option{
		"no rules, a meter":    {WithMeter(Meter{Name: "m", Rules: []strategy.Rule{minute}})},
		"invalid rule":         {WithRules(strategy.Rule{Limit: 0, Window: time.Minute})},
		"nil store":            {WithRules(minute), WithStore(nil)},
		"nil key func":         {WithRules(minute), WithKeyFunc(nil)},
		"nil clock":            {WithRules(minute), WithClock(nil)},
		"bad policy":           {WithRules(minute), WithStoreErrorPolicy(7)},
		"rules twice":          {WithRules(minute), WithRules(minute)},
		"rules and a strategy": {WithRules(minute), WithStrategy(mustFixed(minute))},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			if tr, err := New(nil, opts...); err == nil {
				tr.Close()
				t.Errorf("%s: accepted", name)
			}
		})
	}
}

// TestNewRefusesNilsAndTakesTheStoresClock: a nil option, a typed nil store and a Transport
// clock other than its store's are refused; a Transport over a store that has a clock
// (cache.Traits.Clock) runs on that clock.
func TestNewRefusesNilsAndTakesTheStoresClock(t *testing.T) {
	if _, err := New(nil, WithRules(minute), nil); err == nil || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("nil option: %v", err)
	}
	var m *cache.Memory
	if _, err := New(nil, WithRules(minute), WithStore(m)); err == nil {
		t.Error("typed nil store accepted")
	}
	store, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := New(nil, WithRules(minute), WithStore(store), WithClock(clock.NewManual(t0))); err == nil {
		t.Error("a manual Transport clock over a real-clock store was accepted")
	}
	// A store's clock is the Transport's clock.
	clk := clock.NewManual(t0)
	shared, _ := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	defer shared.Close()
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute), WithStore(shared))
	for range 60 {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
		tr.RoundTrip(req)
	}
	clk.Advance(15 * time.Second)
	if d, _ := tr.WaitTime(context.Background(), "a.example", 1); d != 45*time.Second {
		t.Errorf("wait on the store's clock = %v, want 45s", d)
	}
}

// TestNewErrorsNameTheOption: every error New can return starts with "ratemonitor: " and the
// option at fault, followed by ":" or "(" (New's doc promises it); "New" itself for a nil option
// and for options that need rules given without any. Each option with an input that can be wrong is here, each check of
// New after the options too. (WithPacing, WithSmoothing's flag and WithErrorHandler take no
// input that can be wrong: a nil handler is no handler.)
func TestNewErrorsNameTheOption(t *testing.T) {
	minute := strategy.Rule{Limit: 60, Window: time.Minute}
	mem := func() *cache.Memory {
		m, err := cache.NewMemory(cache.MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	// A memory store whose 1m counters another Transport claimed with a 1 s margin.
	claimed := mem()
	first, err := New(nil, WithRules(strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}),
		WithAppRules("app", strategy.Rule{Limit: 100, Window: time.Minute, Margin: time.Second}), WithStore(claimed))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// A store whose Validate refuses every strategy, as the SQLite store refuses a fixed window
	// with a sub-second margin (cache/sqlitestore/internal/transporttest checks that one).
	refusing := refusingStore{mem()}
	fixed, err := fixedwindow.New(minute)
	if err != nil {
		t.Fatal(err)
	}
	storeClock, _ := cache.NewMemory(cache.MemoryConfig{Clock: clock.NewManual(time.Unix(0, 0))})
	defer storeClock.Close()

	for _, c := range []struct {
		opt  string
		opts []Option
		is   error // also wrapped, when not nil
	}{
		{"New", []Option{WithRules(minute), nil}, nil},
		{"New", []Option{WithKeyFunc(KeyByHost), WithInFlight(2)}, nil},
		{"New", []Option{WithPacing(), WithStoreErrorPolicy(Degrade), WithStore(plainStore{mem()})}, nil},
		{"WithRules", []Option{WithRules()}, nil},
		{"WithRules", []Option{WithRules(strategy.Rule{Limit: 0, Window: time.Minute})}, strategy.ErrInvalidRule},
		{"WithRules", []Option{WithRules(minute), WithRules(minute)}, nil},
		{"WithStrategy", []Option{WithStrategy(nil)}, nil},
		{"WithStrategy", []Option{WithRules(minute), WithStrategy(fixed)}, nil},
		{"WithStore", []Option{WithRules(minute), WithStore(nil)}, nil},
		{"WithStore", []Option{WithStrategy(fixed), WithStore(refusing)}, errRefused},
		{"WithStore", []Option{WithRules(minute), WithStore(claimed)}, cache.ErrCounterConflict},
		{"WithKeyFunc", []Option{WithRules(minute), WithKeyFunc(nil)}, nil},
		{"WithClock", []Option{WithRules(minute), WithClock(nil)}, nil},
		{"WithClock", []Option{WithRules(minute), WithClock(clock.NewManual(time.Unix(0, 0))), WithStore(storeClock)}, nil},
		{"WithStoreErrorPolicy", []Option{WithRules(minute), WithStoreErrorPolicy(StoreErrorPolicy(99))}, nil},
		{"WithLogger", []Option{WithRules(minute), WithLogger(nil)}, nil},
		{"WithObserver", []Option{WithRules(minute), WithObserver(nil)}, nil},
		{"WithCost", []Option{WithRules(minute), WithCost(nil)}, nil},
		{"WithCostReport", []Option{WithRules(minute), WithCostReport(nil)}, nil},
		{"WithSync", []Option{WithRules(minute), WithSync(SyncConfig{Fallback: -time.Second})}, nil},
		{"WithSync", []Option{WithRules(minute), WithSync(SyncConfig{XRateLimitWindow: -time.Second})}, nil},
		{"WithSync", []Option{WithRules(minute), WithSync(SyncConfig{Readers: []headers.Reader{nil}})}, nil},
		{"WithSync", []Option{WithRules(minute), WithSync(SyncConfig{Readers: []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour)}})}, nil},
		{"WithSync", []Option{WithRules(minute), WithSync(SyncConfig{}), WithStore(plainStore{mem()} /* sync_config_test.go: the Store methods only, no Syncer or Leaser */)}, errNoSyncer},
		{"WithAppRules", []Option{WithRules(minute), WithAppRules("", minute)}, nil},
		{"WithAppRules", []Option{WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 1})}, strategy.ErrInvalidRule},
		{"WithAppRules", []Option{WithRules(strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}), WithAppRules("app", minute), WithStore(claimed)}, cache.ErrCounterConflict},
		{"WithDegraded", []Option{WithRules(minute), WithDegraded(DegradedConfig{Share: 2})}, nil},
		{"WithDegraded", []Option{WithRules(minute), WithDegraded(DegradedConfig{Processes: -1})}, nil},
		{"WithDegraded", []Option{WithRules(minute), WithDegraded(DegradedConfig{Share: 0.5, Processes: 2})}, nil},
		{"WithDegraded", []Option{WithRules(minute), WithDegraded(DegradedConfig{ProbeInterval: -time.Second})}, nil},
		{"WithDegraded", []Option{WithRules(minute), WithDegraded(DegradedConfig{}), WithStoreErrorPolicy(SendUncounted)}, nil},
		{"WithSmoothing", []Option{WithStrategy(fixed), WithSmoothing()}, nil},
		{"WithInFlight", []Option{WithRules(minute), WithInFlight(0)}, nil},
		{"WithInFlight", []Option{WithRules(minute), WithInFlight(1), WithStore(plainStore{mem()})}, nil},
		{"WithAppInFlight", []Option{WithRules(minute), WithAppInFlight(0)}, nil},
		{"WithAppInFlight", []Option{WithRules(minute), WithAppInFlight(2)}, nil},
		{"WithInFlightLease", []Option{WithRules(minute), WithInFlight(1), WithInFlightLease(time.Millisecond)}, nil},
		{"WithInFlightLease", []Option{WithRules(minute), WithInFlightLease(time.Second)}, nil},
	} {
		t.Run(c.opt, func(t *testing.T) {
			tr, err := New(nil, c.opts...)
			if err == nil {
				tr.Close()
				t.Errorf("%s: New succeeded, want an error", c.opt)
				return
			}
			msg := err.Error()
			rest, ok := strings.CutPrefix(msg, "ratemonitor: "+c.opt)
			if !ok || rest == "" || (rest[0] != ':' && rest[0] != '(') || strings.Contains(rest, "ratemonitor: ") {
				t.Errorf("%s: error %q, want it to start with %q then ':' or '(' (and say ratemonitor once)", c.opt, msg, "ratemonitor: "+c.opt)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("%s: error %q does not wrap %v", c.opt, msg, c.is)
			}
		})
	}
}

// errRefused is what refusingStore's Validate wraps.
var errRefused = errors.New("test store: refuses every strategy")

// refusingStore is a store that can hold no strategy (cache.Traits.Validate): what New meets
// with a store that cannot hold the rules it is given.
type refusingStore struct{ cache.Store }

func (refusingStore) Describe() cache.Traits {
	return cache.Traits{Validate: func(s *engine.Strategy) error {
		return fmt.Errorf("%w (%d rules)", errRefused, len(s.Rules()))
	}}
}

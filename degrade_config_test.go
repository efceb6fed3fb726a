package ratemonitor

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/degrade"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The degraded mode against real Redis (outages, the hold-back, the share, the carry-over,
// settling, Sentinel master changes, Close, a fleet across failovers) is tested through the
// public API in the Redis store module (its internal/degradetest), so that this module needs
// no Redis; the store decorator's own workings in internal/degrade. Here: the options, and the
// Transport's internal state those tests can only see the effects of, over a shared store that
// fails on demand (outageStore).

// outageStore is a memory store that is not in-process as far as the Transport can tell (it
// hides cache.Traits.InProcess, as a store shared with other processes would), so that Degrade
// gives it a degraded mode; while down is set every operation fails as an unreachable server
// would.
type outageStore struct {
	cache.Store
	down *atomic.Bool
}

var errInjectedOutage = errors.New("outageStore: injected outage")

func newOutageStore(t *testing.T, clk clock.Clock) outageStore {
	t.Helper()
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return outageStore{Store: m, down: &atomic.Bool{}}
}

func (o outageStore) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	if o.down.Load() {
		return engine.Result{}, errInjectedOutage
	}
	return o.Store.Reserve(ctx, s, key, n)
}

func (o outageStore) Record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	if o.down.Load() {
		return errInjectedOutage
	}
	return o.Store.Record(ctx, s, key, n)
}

func (o outageStore) Peek(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Snapshot, error) {
	if o.down.Load() {
		return strategy.Snapshot{}, errInjectedOutage
	}
	return o.Store.Peek(ctx, s, key, n)
}

func (o outageStore) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	if o.down.Load() {
		return errInjectedOutage
	}
	return o.Store.Release(ctx, s, key, at, n)
}

// TestDegradedConfigRefusedOrDefaulted: New refuses a DegradedConfig it cannot follow and a
// policy that contradicts WithDegraded; the policy defaults to Degrade for a paced Transport
// over a shared store (with a degrader) and to SendUncounted for a monitoring one; an explicit
// policy stays; over an in-process store there is nothing to degrade from.
func TestDegradedConfigRefusedOrDefaulted(t *testing.T) {
	bad := map[string][]Option{
		"share above 1":         {WithDegraded(DegradedConfig{Share: 1.5})},
		"share negative":        {WithDegraded(DegradedConfig{Share: -0.25})},
		"share NaN":             {WithDegraded(DegradedConfig{Share: math.NaN()})},
		"processes negative":    {WithDegraded(DegradedConfig{Processes: -2})},
		"share and processes":   {WithDegraded(DegradedConfig{Share: 0.5, Processes: 2})},
		"negative probe":        {WithDegraded(DegradedConfig{ProbeInterval: -time.Second})},
		"degraded, fail open":   {WithDegraded(DegradedConfig{}), WithStoreErrorPolicy(SendUncounted)},
		"fail closed, degraded": {WithStoreErrorPolicy(SendNothing), WithDegraded(DegradedConfig{})},
		"unknown policy":        {WithStoreErrorPolicy(Degrade + 1)},
	}
	st := newOutageStore(t, clock.Real())
	for name, opts := range bad {
		t.Run(name, func(t *testing.T) {
			if tr, err := New(nil, append([]Option{WithRules(minute), WithStore(st), WithPacing()}, opts...)...); err == nil {
				tr.Close()
				t.Errorf("%s: New accepted it", name)
			}
		})
	}
	// Defaults: Degrade for paced Transports, SendUncounted for monitoring ones; WithDegraded
	// chooses Degrade; explicit policies stay. (degradetest's TestOutageHandledAsPolicySays: what each
	// does with Redis down.)
	for _, c := range []struct {
		name string
		opts []Option
		want StoreErrorPolicy
		deg  bool
	}{
		{"paced", []Option{WithPacing()}, Degrade, true},
		{"monitoring", nil, SendUncounted, false},
		{"monitoring, WithDegraded", []Option{WithDegraded(DegradedConfig{Processes: 3})}, Degrade, true},
		{"paced, fail open", []Option{WithPacing(), WithStoreErrorPolicy(SendUncounted)}, SendUncounted, false},
		{"paced, fail closed", []Option{WithPacing(), WithStoreErrorPolicy(SendNothing)}, SendNothing, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTransport(t, nil, append([]Option{WithRules(minute), WithStore(st)}, c.opts...)...)
			if tr.fail.policy != c.want || (tr.fail.deg != nil) != c.deg {
				t.Errorf("%s: policy %v, degrader %v; want %v, %v", c.name, tr.fail.policy, tr.fail.deg != nil, c.want, c.deg)
			}
		})
	}
	// Over an in-process store there is nothing to degrade from.
	if tr := newTransport(t, nil, WithRules(minute), WithPacing()); tr.fail.policy != Degrade || tr.fail.deg != nil {
		t.Errorf("memory store: policy %v, degrader %v", tr.fail.policy, tr.fail.deg != nil)
	}
}

// TestDegradeCancelWhileSettlingKeepsTheCarriedCount: Transport.Reserve's slots reserved while
// degraded and cancelled once the store answers again are cancelled while the degraded mode is
// settling, in another generation, so the shared store keeps the carried-over count (degradetest's
// TestCancelAfterReturnKeepsCarriedSlots checks the count in Redis and sees the return only as the Recovered
// event).
func TestDegradeCancelWhileSettlingKeepsTheCarriedCount(t *testing.T) {
	clk := clock.NewManual(t0)
	st := newOutageStore(t, clk)
	const probe = 20 * time.Millisecond
	rule := strategy.Rule{Limit: 20, Window: time.Minute}
	tr := newTransport(t, nil, WithRules(rule), WithStore(st), WithPacing(), WithClock(clk),
		WithDegraded(DegradedConfig{NoHoldBack: true, ProbeInterval: probe}), WithLogger(discard))
	ctx := context.Background()
	st.down.Store(true)
	r, err := tr.Reserve(ctx, "k", 3)
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(false)
	clk.Advance(probe)
	// A probe is due: this call probes, finds the store back and carries the 3 over.
	if _, err := tr.AllocationUsed(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	state := tr.fail.deg.State()
	if state != degrade.Settling || tr.gen() == r.gen {
		t.Fatalf("state %d, generation %d (reserved in %d); want settling, another generation", state, tr.gen(), r.gen)
	}
	if err := r.Cancel(ctx); err != nil || r.Remaining() != 0 {
		t.Fatalf("cancel: %v, %d left", err, r.Remaining())
	}
	snap, err := st.Peek(ctx, tr.strat, "k", 0)
	if err != nil || snap.Usage[0].Used != 3 {
		t.Errorf("shared store counts %+v, %v; want the 3 carried over, kept", snap.Usage, err)
	}
}

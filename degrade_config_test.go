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
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The degraded mode against real Redis (outages, the hold-back, the share, the carry-over,
// settling, Sentinel master changes, Close, a fleet across failovers) is tested through the
// public API in the Redis store module (its internal/degradetest), so that this module needs
// no Redis. Here: what needs no server, and the Transport's internal state those tests can
// only see the effects of, over a shared store that fails on demand (outageStore).

// outageStore is a memory store that is not in-process as far as the Transport can tell (it
// hides cache.Traits.InProcess, as a store shared with other processes would), so that Degrade
// gives it a degraded mode; while down is set every operation fails as an unreachable server
// would, and master, when set, names the Sentinel master it reached (SentinelMaster).
type outageStore struct {
	cache.Store
	down   *atomic.Bool
	master *atomic.Value // string
}

var errInjectedOutage = errors.New("outageStore: injected outage")

func newOutageStore(t *testing.T, clk clock.Clock) outageStore {
	t.Helper()
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	master := &atomic.Value{}
	master.Store("")
	return outageStore{Store: m, down: &atomic.Bool{}, master: master}
}

func (o outageStore) SentinelMaster() string { return o.master.Load().(string) }

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
			if tr.policy != c.want || (tr.deg != nil) != c.deg {
				t.Errorf("%s: policy %v, degrader %v; want %v, %v", c.name, tr.policy, tr.deg != nil, c.want, c.deg)
			}
		})
	}
	// Over an in-process store there is nothing to degrade from.
	if tr := newTransport(t, nil, WithRules(minute), WithPacing()); tr.policy != Degrade || tr.deg != nil {
		t.Errorf("memory store: policy %v, degrader %v", tr.policy, tr.deg != nil)
	}
}

// TestDegradeMasterChangeReportsBothMasters: the Degraded event of a master change carries a
// masterChangedError naming both masters (degradetest's TestNewMasterGrantUnusedUntilHoldBack checks the
// behaviour over Redis, and the error's words).
func TestDegradeMasterChangeReportsBothMasters(t *testing.T) {
	clk := clock.NewManual(t0)
	st := newOutageStore(t, clk)
	st.master.Store("127.0.0.1:1")
	rec := &observe.Recorder{}
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), WithStore(st), WithClock(clk),
		WithPacing(), WithObserver(rec), WithLogger(discard))
	ctx := context.Background()
	if res, err := tr.ops.Reserve(ctx, tr.strat, "k", 1); err != nil || !res.Allowed {
		t.Fatalf("first master: %+v, %v", res, err)
	}
	st.master.Store("127.0.0.1:2")
	if res, err := tr.ops.Reserve(ctx, tr.strat, "k", 1); err != nil || res.Allowed || res.Wait != time.Minute {
		t.Fatalf("new master: %+v, %v; want held back a minute", res, err)
	}
	evs := rec.Events()
	var mc masterChangedError
	if len(evs) != 1 || evs[0].Kind != observe.Degraded || !errors.As(evs[0].Err, &mc) || mc.from != "127.0.0.1:1" || mc.to != "127.0.0.1:2" {
		t.Errorf("events %v, want one Degraded with the change from 127.0.0.1:1 to 127.0.0.1:2", rec.Strings())
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
	tr.deg.mu.Lock()
	state := tr.deg.state
	tr.deg.mu.Unlock()
	if state != settling || tr.gen() == r.gen {
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

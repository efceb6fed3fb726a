package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// What each StoreErrorPolicy does when the store fails: SendUncounted sends the request
// uncounted and reports the error; SendNothing sends nothing and returns a *StoreError;
// (Degrade, the paced default over a shared store: degrade_config_test.go and the Redis
// module's degradetest). Each case is on a real store that fails: a closed one, or failOn.

// TestStoreErrorSendUncountedSendsAndSendNothingRefuses: over a closed store, SendUncounted
// (a monitoring Transport's default) sends and hands the error to the error handler;
// SendNothing sends nothing, closes the request's body and returns a *StoreError that says
// so; AllocationUsed returns the store's error.
func TestStoreErrorSendUncountedSendsAndSendNothingRefuses(t *testing.T) {
	broken, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	srv, hits := upstreamtest.Counting(t, nil)

	var reported []error
	open := newTransport(t, nil, WithRules(minute), WithStore(broken), WithLogger(discard),
		WithErrorHandler(func(_ *http.Request, key string, err error) { reported = append(reported, err) }))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: open}, srv.URL); err != nil {
		t.Fatalf("fail open returned %v", err)
	}
	if hits.Load() != 1 || len(reported) != 1 || !errors.Is(reported[0], cache.ErrClosed) {
		t.Errorf("fail open: upstream hits %d, reported %v", hits.Load(), reported)
	}

	closed := newTransport(t, nil, WithRules(minute), WithStore(broken), WithStoreErrorPolicy(SendNothing), WithLogger(discard))
	body := &bodySpy{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
	resp, err := closed.RoundTrip(req)
	var se *StoreError
	if resp != nil || !errors.As(err, &se) || !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("fail closed: %v, %v", resp, err)
	}
	if hits.Load() != 1 {
		t.Error("fail closed sent the request")
	}
	if !body.closed {
		t.Error("fail closed did not close the request body")
	}
	if !strings.Contains(err.Error(), "not sent") {
		t.Errorf("message: %v", err)
	}
	if _, err := closed.AllocationUsed(context.Background(), "k"); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("AllocationUsed on a broken store: %v", err)
	}
}

// TestPacedStoreErrorSendNothingRefusesAndSendUncountedSends: the same under pacing, and
// Reserve returns a *StoreError.
func TestPacedStoreErrorSendNothingRefusesAndSendUncountedSends(t *testing.T) {
	broken, _ := cache.NewMemory(cache.MemoryConfig{})
	broken.Close()
	srv, hits := upstreamtest.Counting(t, nil)
	closed := newTransport(t, nil, WithRules(minute), WithStore(broken), WithPacing(), WithStoreErrorPolicy(SendNothing),
		WithLogger(discard))
	var se *StoreError
	if _, err := upstreamtest.Get(t, &http.Client{Transport: closed}, srv.URL); !errors.As(err, &se) || hits.Load() != 0 {
		t.Errorf("fail closed: %v, hits %d", err, hits.Load())
	}
	// SendUncounted by name: paced Transports default to Degrade, which fails closed on a closed
	// store (TestClosedStoreIsNotAnOutage).
	open := newTransport(t, nil, WithRules(minute), WithStore(broken), WithPacing(), WithStoreErrorPolicy(SendUncounted), WithLogger(discard))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: open}, srv.URL); err != nil || hits.Load() != 1 {
		t.Errorf("fail open: %v, hits %d", err, hits.Load())
	}
	if _, err := open.Reserve(context.Background(), "k", 1); !errors.As(err, &se) {
		t.Errorf("Reserve on a broken store: %v", err)
	}
}

// failOn is a memory store whose operations on one key fail, as another Redis Cluster shard
// that is down would.
type failOn struct {
	*cache.Memory
	key string
}

var errShardDown = errors.New("shard down")

func (f failOn) Record(ctx context.Context, s *engine.Strategy, key string, n int) error {
	if key == f.key {
		return errShardDown
	}
	return f.Memory.Record(ctx, s, key, n)
}

func (f failOn) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	if key == f.key {
		return engine.Result{}, errShardDown
	}
	return f.Memory.Reserve(ctx, s, key, n)
}

// TestAppKeyStoreErrorCountsTheKeyOnlyWhenSent: when the app key's store fails, SendNothing sends
// nothing and leaves no count on the request's key; SendUncounted sends and counts the request's
// key.
func TestAppKeyStoreErrorCountsTheKeyOnlyWhenSent(t *testing.T) {
	for _, policy := range []StoreErrorPolicy{SendNothing, SendUncounted} {
		for _, paced := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v, paced %v", policy, paced), func(t *testing.T) {
				clk := clock.NewManual(t0)
				m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				b := &clockBase{clk: clk}
				var reported []string
				opts := []Option{WithStore(failOn{m, "app"}), WithRules(minute), WithAppRules("app", minute), WithStoreErrorPolicy(policy),
					WithLogger(discard), WithErrorHandler(func(_ *http.Request, key string, _ error) { reported = append(reported, key) })}
				if paced {
					opts = append(opts, WithPacing())
				}
				tr := newTransport(t, b, opts...)
				err = doKey(tr, context.Background(), "k")
				used := usedOf(t, tr, "k")[0]
				var se *StoreError
				switch policy {
				case SendNothing:
					if !errors.As(err, &se) || se.Key != "app" || b.count() != 0 || used != 0 {
						t.Errorf("fail closed, paced %v: %v, sent %d, k counts %d; want a StoreError on app, nothing sent or counted", paced, err, b.count(), used)
					}
				case SendUncounted:
					if err != nil || b.count() != 1 || used != 1 || len(reported) != 1 || reported[0] != "app" {
						t.Errorf("fail open, paced %v: %v, sent %d, k counts %d, reported %v", paced, err, b.count(), used, reported)
					}
				}
			})
		}
	}
}

// TestSendUncountedCountsTheAppKeyWhenTheKeyFails: under SendUncounted a request whose key's
// store fails is sent and still counted on the app key, paced or not.
func TestSendUncountedCountsTheAppKeyWhenTheKeyFails(t *testing.T) {
	for _, paced := range []bool{false, true} {
		t.Run(fmt.Sprintf("paced %v", paced), func(t *testing.T) {
			clk := clock.NewManual(t0)
			m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			b := &clockBase{clk: clk}
			opts := []Option{WithStore(failOn{m, "k"}), WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 1, Window: time.Minute}), WithLogger(discard)}
			if paced {
				// SendUncounted by name: paced Transports default to Degrade.
				opts = append(opts, WithPacing(), WithStoreErrorPolicy(SendUncounted))
			}
			tr := newTransport(t, b, opts...)
			for range 3 {
				if err := doKey(tr, context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
			}
			snap, _ := m.Peek(context.Background(), tr.meters[0].strat, "app", 0)
			if snap.Usage[0].Used != 3 {
				t.Errorf("paced %v: 3 requests sent, the healthy app key counts %d (app limit 1/min, upstream saw %d in a minute)", paced, snap.Usage[0].Used, b.maxInWindow(time.Minute))
			}
		})
	}
}

// TestInFlightStoreErrorSendUncountedSendsWithoutASlot: when the store cannot take a lease (here:
// closed), SendUncounted sends without a slot and reports the error (lease and record: 2),
// SendNothing sends nothing and returns a *StoreError, reported once.
func TestInFlightStoreErrorSendUncountedSendsWithoutASlot(t *testing.T) {
	for _, policy := range []StoreErrorPolicy{SendUncounted, SendNothing} {
		t.Run(policy.String(), func(t *testing.T) {
			m, err := cache.NewMemory(cache.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			up, hits := upstreamtest.Counting(t, nil)
			var reported atomic.Int64
			tr := newTransport(t, nil, WithRules(minute), WithStore(m), WithInFlight(1), WithStoreErrorPolicy(policy), WithLogger(discard),
				WithErrorHandler(func(_ *http.Request, _ string, err error) {
					if errors.Is(err, cache.ErrClosed) {
						reported.Add(1)
					}
				}))
			m.Close()
			r, err := send(tr, context.Background(), up.URL)
			var se *StoreError
			switch policy {
			case SendUncounted:
				if err != nil || hits.Load() != 1 || reported.Load() != 2 {
					t.Errorf("fail open: %v, hits %d, reported %d, want sent, 1, 2", err, hits.Load(), reported.Load())
				}
				if err == nil {
					r.Body.Close()
				}
			case SendNothing:
				if !errors.As(err, &se) || hits.Load() != 0 || reported.Load() != 1 {
					t.Errorf("fail closed: %v, hits %d, reported %d, want a *StoreError, 0, 1", err, hits.Load(), reported.Load())
				}
			}
			if n := tr.InFlight(strings.TrimPrefix(up.URL, "http://")); n != 0 {
				t.Errorf("%v: InFlight %d, want 0", policy, n)
			}
		})
	}
}

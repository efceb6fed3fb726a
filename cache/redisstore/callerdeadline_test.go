package redisstore

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestCallerDeadlineFailureReturnsWithContextEnded gives a healthy Redis operations whose
// callers' deadlines (0 to 2 ms) are shorter than a round trip on a busy machine. The client
// sets its connection's deadline to the context's, and the connection's can fire a moment
// before the context's own timer: an operation that fails for the caller's deadline must
// still return with that context ended and its error wrapped, so that nobody (the degraded
// mode, an error handler) takes it for the store's failure.
func TestCallerDeadlineFailureReturnsWithContextEnded(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{})
	s := mustStrategy(t, strategy.Rule{Limit: 1_000_000, Window: time.Minute})
	var failed, early atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Int64N(int64(2*time.Millisecond))))
				_, err := st.Reserve(ctx, s, "k", 1)
				if err != nil {
					failed.Add(1)
					if ctx.Err() == nil || !errors.Is(err, context.DeadlineExceeded) {
						if early.Add(1) <= 3 { // the first few say enough
							t.Errorf("Reserve failed with the caller's context not yet ended (%v): %v", ctx.Err(), err)
						}
					}
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if early.Load() > 0 {
		t.Errorf("%d of %d failed operations returned before their callers' contexts ended", early.Load(), failed.Load())
	}
	t.Logf("%d of 2400 operations ended by their callers' deadlines", failed.Load())
}

// TestCallerDeadlinesNeverDegradeTransport sends, from 16 goroutines through a paced
// Transport on a healthy Redis, requests whose own deadlines (0 to 2 ms, or 0 to 20 ms) are
// often shorter than a store round trip: the Transport must never go into degraded mode for
// them, since a caller's deadline says nothing about the store.
func TestCallerDeadlinesNeverDegradeTransport(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	for _, longest := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond} {
		t.Run("deadlines up to "+longest.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			st := newStore(t, srv.Client(), Options{})
			var rec observetest.Recorder
			tr, err := ratemonitor.New(upstream.Client().Transport,
				ratemonitor.WithRules(strategy.Rule{Limit: 1_000_000, Window: time.Minute}),
				ratemonitor.WithStore(st), ratemonitor.WithPacing(), ratemonitor.WithObserver(&rec))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			client := &http.Client{Transport: tr}
			var sent, cut atomic.Int64
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 2))
					for range 100 {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Int64N(int64(longest))))
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, upstream.URL, nil)
						resp, err := client.Do(req)
						if err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							sent.Add(1)
						} else {
							cut.Add(1)
						}
						cancel()
					}
				}()
			}
			wg.Wait()
			t.Logf("%d requests answered, %d ended by their own deadlines", sent.Load(), cut.Load())
			for _, e := range rec.Events() {
				if e.Kind == observe.Degraded {
					t.Errorf("the Transport went into degraded mode on a healthy store: %v", e.Err)
				}
			}
		})
	}
}

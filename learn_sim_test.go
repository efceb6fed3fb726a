package ratemonitor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// learnSim runs requests of a Transport made without rules against a stand-in in simulated
// time: the clock moves to the next sleeper's deadline only while no request is between its
// grant in the store and its answer from the stand-in (as real time would move during a
// transit of no length), so that a request arrives at the instant it was granted.
type learnSim struct {
	clk   *clock.Manual
	store *learnGate
	// after counts the requests sent after the Transport read the first answer: those it
	// charged on the meters it learned (a request sent while it knew none is charged nothing);
	// refusedAfter those of them refused; unmetered and refusedUnmetered the others.
	after, refusedAfter, accepted                  atomic.Int64
	unmetered, refusedUnmetered, unmeteredAccepted atomic.Int64
	end                                            time.Time // accepted counts the requests accepted before it
}

// learnGate is a memory store that counts the grants not yet answered; each request's own
// grants are tallied in its context (tallyKey), so that its answer takes back exactly those.
type learnGate struct {
	*cache.Memory
	mu      sync.Mutex
	pending int
}

type tallyKey struct{}

func (g *learnGate) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	res, err := g.Memory.Reserve(ctx, s, key, n)
	if tally, ok := ctx.Value(tallyKey{}).(*int); ok && err == nil && res.Allowed {
		g.pending++
		*tally++
	}
	return res, err
}

func (g *learnGate) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if tally, ok := ctx.Value(tallyKey{}).(*int); ok && *tally > 0 {
		g.pending--
		*tally--
	}
	return g.Memory.Release(ctx, s, key, at, n)
}

func newLearnSim(t *testing.T, end time.Duration) *learnSim {
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return &learnSim{clk: clk, store: &learnGate{Memory: mem}, end: t0.Add(end)}
}

// base returns a RoundTripper serving h in process, counting what arrives and its answers.
func (s *learnSim) base(h http.Handler) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		at := s.clk.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		charged := false
		if tally, ok := req.Context().Value(tallyKey{}).(*int); ok {
			s.store.mu.Lock()
			charged = *tally > 0
			s.store.pending -= *tally
			*tally = 0
			s.store.mu.Unlock()
		}
		resp := rec.Result()
		resp.Request = req
		refused := resp.StatusCode == http.StatusTooManyRequests
		switch {
		case charged:
			s.after.Add(1)
			if refused {
				s.refusedAfter.Add(1)
			}
		default:
			s.unmetered.Add(1)
			if refused {
				s.refusedUnmetered.Add(1)
			} else {
				s.unmeteredAccepted.Add(1)
			}
		}
		if resp.StatusCode == http.StatusOK && at.Before(s.end) {
			s.accepted.Add(1)
		}
		return resp, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// run moves the clock until s.end, then cancels ctx's children (the requests still waiting)
// through the returned context; stop ends the mover.
func (s *learnSim) run(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		// The clock moves once the sleepers have stayed the same for a while: a sleeper just
		// woken may still be on its way to the store, and a jump to another's deadline
		// meanwhile would lose the time it could have sent in.
		var last time.Time
		lastN, stable := 0, 0
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Microsecond):
			}
			s.store.mu.Lock()
			next, ok := s.clk.Next()
			if n := s.clk.Sleepers(); n != lastN || !next.Equal(last) || s.store.pending != 0 {
				last, lastN, stable = next, n, 0
			} else {
				stable++
			}
			if ok && s.store.pending == 0 && stable >= 20 {
				stable = 0
				if !next.Before(s.end) {
					s.clk.Set(s.end)
					cancel()
				} else {
					s.clk.Set(next)
				}
			}
			s.store.mu.Unlock()
		}
	}()
	return ctx, func() { close(done); <-stopped; cancel() }
}

// drive sends requests from goroutines until the clock reaches s.end; each request is made
// by newReq.
func (s *learnSim) drive(t *testing.T, tr http.RoundTripper, goroutines int, newReq func(ctx context.Context, i int) *http.Request) {
	ctx, stop := s.run(context.Background())
	defer stop()
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && s.clk.Now().Before(s.end); i++ {
				tally := new(int)
				req := newReq(context.WithValue(ctx, tallyKey{}, tally), g*1_000_000+i)
				resp, err := c.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("request: %v", err)
					}
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

// firstAnswerOnly checks that exactly want requests went out before a first answer was read
// (one per Transport: the first-answer gate) and that none was refused.
func (s *learnSim) firstAnswerOnly(t *testing.T, want int64) {
	t.Helper()
	if n, r := s.unmetered.Load(), s.refusedUnmetered.Load(); n != want || r != 0 {
		t.Errorf("%d requests sent before a first answer, %d of them refused; want %d, none refused", n, r, want)
	}
}

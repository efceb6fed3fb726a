package conformance

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

type Grant = storetest.Grant

var Check = storetest.Check

const goroutines = 64

// workers is how many goroutines the cases other than reserve64 (contention itself) run at
// once: 64, or 16 on a slow store (Target.Slow), where 64 goroutines on one key spend the run
// in conditional-write retries.
func workers(tg Target) int {
	if tg.Slow > 1 && *soak == 0 {
		return 16
	}
	return goroutines
}

// micro rounds d up to a whole microsecond: the Redis store works in µs, and a wait rounded
// down would be early.
func micro(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1).Truncate(time.Microsecond)
}

// tolerance is how late a wait may be honoured: one granularity of the finest rule under the
// rolling window (its buckets), one microsecond otherwise.
func tolerance(s *engine.Strategy) time.Duration {
	tol := time.Microsecond
	if s.Name() == "rollingwindow" {
		for _, r := range s.Rules() {
			tol = max(tol, r.Bucket())
		}
	}
	return tol
}

// reserve64 is contention on one key: rounds of 64 goroutines reserving at one manual instant,
// then one caller alone told to wait d and retrying after d, then the clock moved on. Every
// grant is judged at its Result.At; every wait must lie in [0, longest]; the lone caller must be
// granted within d plus one granularity; and the store's usage at the end must equal the
// model's.
func reserve64(t *testing.T, tg Target, s *engine.Strategy) {
	rep := newReport(t, tg)
	defer rep.done()
	clk := clock.NewManual(t0)
	rec := &recorder{Store: tg.Open(t, clk)}
	key := newKey("reserve")
	c := ctx(t)
	rng := rand.New(rand.NewPCG(1, uint64(len(s.Name()))))
	honoured, late, ops := 0, 0, 0
	for range rounds(tg, 10, 50*time.Millisecond) {
		var wg sync.WaitGroup
		var errs atomic.Int64
		for i := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 1 + i%5/4 // one in five asks for a burst of 2
				if _, err := rec.reserve(c, s, key, n); err != nil {
					if errs.Add(1) == 1 {
						rep.fail("reserve under contention at %v: %v", clk.Now(), err)
					}
				}
			}()
		}
		wg.Wait()
		ops += goroutines
		// A lone caller told to wait d is granted after d (within one granularity).
		res, err := rec.reserve(c, s, key, 1)
		ops++
		if err != nil {
			rep.fail("lone reserve: %v", err)
		} else if !res.Allowed {
			d := res.Wait
			clk.Advance(micro(d))
			res, err = rec.reserve(c, s, key, 1)
			ops++
			if err == nil && !res.Allowed {
				clk.Advance(tolerance(s))
				res, err = rec.reserve(c, s, key, 1)
				ops++
				late++
			}
			switch {
			case err != nil:
				rep.fail("reserve after the wait told: %v", err)
			case !res.Allowed:
				rep.fail("told to wait %v at %v, still refused %v later (wait now %v)", d, clk.Now().Add(-micro(d)-tolerance(s)), micro(d)+tolerance(s), res.Wait)
			default:
				honoured++
			}
		}
		clk.Advance(time.Duration(rng.Int64N(400_000)) * time.Microsecond)
	}
	grants, waits, _ := rec.kept()
	rep.waitsInBounds(s, waits, 0)
	v := rep.violations("grants at the store's instants", s, grants, 0)
	now := clk.Now()
	if got, want := storetest.Used(t, rec, s, key), storetest.ModelUsed(s, grants, now); !slices.Equal(got, want) {
		rep.fail("usage at the end: store %v, model %v (%d grants)", got, want, len(grants))
	}
	t.Logf("%s %s: %d reserves, %d grants, %d waits told and honoured (%d one granularity late), %d violations",
		tg.Name, s.Name(), ops, len(grants), honoured, late, v)
}

// record64 is monitoring: rounds of 64 goroutines recording 1 to 3 requests at one instant,
// the clock moved on between rounds. After every round the store's usage must equal the
// model's: no record lost, none counted twice.
func record64(t *testing.T, tg Target, s *engine.Strategy) {
	rep := newReport(t, tg)
	defer rep.done()
	clk := clock.NewManual(t0)
	st := &recorder{Store: tg.Open(t, clk)}
	key := newKey("record")
	c := ctx(t)
	rng := rand.New(rand.NewPCG(2, uint64(len(s.Name()))))
	var recs []Grant
	var mu sync.Mutex
	ops := 0
	for round := range rounds(tg, 8, 30*time.Millisecond) {
		var wg sync.WaitGroup
		for i := range workers(tg) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 1 + i%3
				if err := st.record(c, s, key, n); err != nil {
					rep.fail("record: %v", err)
					return
				}
				mu.Lock()
				recs = append(recs, Grant{At: clk.Now(), N: n})
				mu.Unlock()
			}()
		}
		wg.Wait()
		ops += workers(tg)
		if got, want := storetest.Used(t, st, s, key), storetest.ModelUsed(s, recs, clk.Now()); !slices.Equal(got, want) {
			rep.fail("round %d at %v: store counts %v, model %v", round, clk.Now(), got, want)
			break
		}
		clk.Advance(time.Duration(rng.Int64N(700_000)) * time.Microsecond)
	}
	t.Logf("%s %s: %d records, usage equal to the model's after every round", tg.Name, s.Name(), ops)
}

// admit64 is a server's entry point: rounds of 64 goroutines (16 on a slow store) through middleware.Limiter (every
// other round) or the store's Admit directly. Every admitted attempt must reach the handler
// exactly once; grants are judged at Decision.At; Retry-After must lie in [0, longest]; the
// store's usage must equal the model's (the fixed window counts refused attempts too).
func admit64(t *testing.T, tg Target, s *engine.Strategy) {
	rep := newReport(t, tg)
	defer rep.done()
	clk := clock.NewManual(t0)
	rec := &recorder{Store: tg.Open(t, clk)}
	key := newKey("admit")
	c := ctx(t)
	lim, err := middleware.New(rec, s, middleware.WithKeyFunc(func(*http.Request) (string, error) { return key, nil }))
	if err != nil {
		t.Fatalf("middleware.New over %s: %v", tg.Name, err)
	}
	var served atomic.Int64
	h := lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	rng := rand.New(rand.NewPCG(3, uint64(len(s.Name()))))
	var attempts []Grant // what counts under the fixed window
	var mu sync.Mutex
	for round := range rounds(tg, 8, 50*time.Millisecond) {
		viaMiddleware := round%2 == 0
		before, _, _ := rec.kept()
		servedBefore := served.Load()
		var wg sync.WaitGroup
		for range workers(tg) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if viaMiddleware {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
					if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
						rep.fail("middleware answered %d: %s", w.Code, w.Body)
					}
					mu.Lock()
					attempts = append(attempts, Grant{At: clk.Now(), N: 1})
					mu.Unlock()
					return
				}
				d, err := rec.admit(c, s, key, 1)
				if err != nil {
					rep.fail("admit: %v", err)
					return
				}
				mu.Lock()
				attempts = append(attempts, Grant{At: d.At, N: 1})
				mu.Unlock()
			}()
		}
		wg.Wait()
		after, _, _ := rec.kept()
		if viaMiddleware && served.Load()-servedBefore != int64(len(after)-len(before)) {
			rep.fail("round %d: the handler served %d requests, the store admitted %d", round, served.Load()-servedBefore, len(after)-len(before))
		}
		clk.Advance(time.Duration(rng.Int64N(400_000)) * time.Microsecond)
	}
	grants, waits, _ := rec.kept()
	rep.waitsInBounds(s, waits, 0)
	v := rep.violations("admissions at the store's instants", s, grants, 0)
	counted := grants
	if s.Name() == "fixedwindow" {
		counted = attempts
	}
	if got, want := storetest.Used(t, rec, s, key), storetest.ModelUsed(s, counted, clk.Now()); !slices.Equal(got, want) {
		rep.fail("usage at the end: store %v, model %v", got, want)
	}
	t.Logf("%s %s: %d attempts, %d admitted (%d served through the middleware), %d violations", tg.Name, s.Name(), len(attempts), len(grants), served.Load(), v)
}

// skewed is a clock that can be stepped back as well as forward: a manual clock plus an
// offset, as a host's wall clock set by hand or by NTP.
type skewed struct {
	m   *clock.Manual
	off atomic.Int64
}

func (k *skewed) Now() time.Time                                   { return k.m.Now().Add(time.Duration(k.off.Load())) }
func (k *skewed) Sleep(ctx context.Context, d time.Duration) error { return k.m.Sleep(ctx, d) }

package sqlitestore

import (
	"context"
	"errors"
	"math/rand"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestCancelStormNeverOverAdmits: contexts cancelled at random instants while many goroutines
// use the one connection, under each strategy: the number admitted never exceeds the limit,
// every admission is recorded (the fixed window counts refused attempts too), and the store
// keeps working. The errors the cancellations give are logged by kind, the key's name as K
// (begin, read, write or commit ended by the deadline; a commit after the driver rolled back).
func TestCancelStormNeverOverAdmits(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, _ := open(t, Options{Clock: clk, PruneEvery: 7})
	quoted := regexp.MustCompile(`"[^"]*"`)
	for _, s := range []*engine.Strategy{
		must(fixedwindow.New(strategy.Rule{Limit: 200, Window: time.Hour})),
		must(rollingwindow.New(strategy.Rule{Limit: 200, Window: time.Hour})),
		must(tokenbucket.New(strategy.Rule{Limit: 200, Window: time.Hour})),
	} {
		t.Run(s.Name(), func(t *testing.T) {
			var admitted, errs atomic.Int64
			var mu sync.Mutex
			kinds := map[string]int{}
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewSource(int64(g)))
					for range 40 {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Intn(4000))*time.Microsecond)
						d, err := st.Admit(ctx, s, "k", 1)
						cancel()
						if err != nil {
							errs.Add(1)
							mu.Lock()
							kinds[quoted.ReplaceAllString(err.Error(), "K")]++
							mu.Unlock()
							continue
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%s: admitted %d, errors %d", s.Name(), admitted.Load(), errs.Load())
			for k, n := range kinds {
				t.Logf("%s: %5d × %s", s.Name(), n, k)
			}
			if admitted.Load() > 200 {
				t.Errorf("%s: over-admission: %d > 200", s.Name(), admitted.Load())
			}
			// the store still works, with a fresh context
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := st.Admit(ctx, s, "after", 1); err != nil {
				t.Errorf("%s: store broken after the storm: %v", s.Name(), err)
			}
			snap, err := st.Peek(ctx, s, "k", 0)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: used %d", s.Name(), snap.Usage[0].Used)
			if s.Name() != "fixedwindow" && int64(snap.Usage[0].Used) < admitted.Load() {
				t.Errorf("%s: admitted %d but only %d recorded", s.Name(), admitted.Load(), snap.Usage[0].Used)
			}
		})
	}
}

// TestCloseDuringRequestsNeverHangs: closing the store while requests are in flight returns,
// and in-flight and later calls fail with an error (ideally cache.ErrClosed; another one is
// logged), never hang.
func TestCloseDuringRequestsNeverHangs(t *testing.T) {
	st, _ := open(t, Options{})
	s := must(rollingwindow.New(strategy.Rule{Limit: 1_000_000, Window: time.Minute}))
	var wg sync.WaitGroup
	var other atomic.Value
	stop := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := st.Admit(context.Background(), s, "k", 1)
				if err != nil && !errors.Is(err, cache.ErrClosed) {
					other.Store(err.Error())
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { st.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	if v := other.Load(); v != nil {
		t.Logf("in-flight error after Close is not cache.ErrClosed: %v", v)
	}
}

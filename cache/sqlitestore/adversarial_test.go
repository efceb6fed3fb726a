package sqlitestore

import (
	"context"
	"errors"
	"math/rand"
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

// Keys with NUL, '|', invalid UTF-8, very long: each must be counted on its own and exactly.
func TestWeirdKeys(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, _ := open(t, Options{Clock: clk})
	strats := map[string]*engine.Strategy{
		"fixed":   must(fixedwindow.New(strategy.Rule{Limit: 3, Window: time.Minute})),
		"rolling": must(rollingwindow.New(strategy.Rule{Limit: 3, Window: time.Minute})),
		"bucket":  must(tokenbucket.New(strategy.Rule{Limit: 3, Window: time.Minute})),
	}
	long := make([]byte, 100_000)
	for i := range long {
		long[i] = 'a'
	}
	keys := []string{"", "a\x00b", "a\x00c", "a", "\x00", "60s|x", "x|y", "\xff\xfe", "ключ", string(long), string(long) + "b"}
	for name, s := range strats {
		for _, k := range keys {
			allowed := 0
			for range 5 {
				d, err := st.Admit(context.Background(), s, k, 1)
				if err != nil {
					t.Fatalf("%s key %q: %v", name, k[:min(len(k), 10)], err)
				}
				if d.Allowed {
					allowed++
				}
			}
			if allowed != 3 {
				t.Errorf("%s key %q: %d of 5 admitted, want 3", name, k[:min(len(k), 10)], allowed)
			}
		}
	}
}

// Cancelling contexts at random instants while many goroutines use the one connection: the
// store must keep working, nothing may be left open, and the number admitted must never
// exceed the limit.
func TestCancelStorm(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, _ := open(t, Options{Clock: clk, PruneEvery: 7})
	for _, s := range []*engine.Strategy{
		must(fixedwindow.New(strategy.Rule{Limit: 200, Window: time.Hour})),
		must(rollingwindow.New(strategy.Rule{Limit: 200, Window: time.Hour})),
		must(tokenbucket.New(strategy.Rule{Limit: 200, Window: time.Hour})),
	} {
		var admitted, errs atomic.Int64
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
	}
}

// TestCorruptStateIsReplaced: a corrupt encoded state whose expires_at is the end of time does
// not make the key fail for ever.
func TestCorruptStateIsReplaced(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, _ := open(t, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 3, Window: time.Minute}))
	if _, err := st.Admit(context.Background(), s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().Exec(`UPDATE rate_limit_state SET state = x'0102', expires_at = 9223372036854775807`); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24 * time.Hour)
	if _, err := st.PruneExpired(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := st.Admit(context.Background(), s, "k", 1)
	t.Logf("a day later: %v", err)
	if err != nil {
		t.Errorf("corrupt row bricks key forever: %v", err)
	}
}

// Closing the store while requests are in flight: in-flight and later calls must fail with
// an error (ideally cache.ErrClosed), never hang.
func TestCloseDuringRequests(t *testing.T) {
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

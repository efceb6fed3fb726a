package degradetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestCloseEndsCallersInHoldBack: Redis is down, so paced callers wait out the degraded
// mode's hold-back (a minute here), waking every ProbeInterval. Close must end them: each
// returns at once with an error wrapping cache.ErrClosed, instead of sleeping and probing
// Redis until the hold-back ends (found by review: 4 of 4 still running 3 s after Close). At
// once is asserted as within 30 s, half the hold-back: room for a loaded machine.
func TestCloseEndsCallersInHoldBack(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	defer st.Close()
	tr, err := ratemonitor.New(&okBase{}, ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), ratemonitor.WithStore(st),
		ratemonitor.WithPacing(), ratemonitor.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	var running atomic.Int64
	done := make(chan error, 4)
	for range 4 {
		running.Add(1)
		go func() {
			defer running.Add(-1)
			done <- doKey(tr, context.Background(), "k")
		}()
	}
	time.Sleep(time.Second) // degraded, in the hold-back
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	timeout := time.After(30 * time.Second)
	for i := range 4 {
		select {
		case err := <-done:
			if !errors.Is(err, cache.ErrClosed) {
				t.Errorf("caller %d returned %v after Close: %v, want an error wrapping cache.ErrClosed", i, time.Since(closed), err)
			}
		case <-timeout:
			t.Fatalf("%d of 4 paced callers still running %v after Close (the hold-back lasts a minute)", running.Load(), time.Since(closed).Round(time.Millisecond))
		}
	}
}

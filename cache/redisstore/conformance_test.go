package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest/conformance"
)

// conformanceTimeout bounds each Redis round trip in the suite's real-time cases: shorter than
// the 400 ms pause the suite applies, so that the pause is an outage, and long enough that 192
// goroutines under -race on two cores rarely time out without one.
const conformanceTimeout = 250 * time.Millisecond

// TestConformance runs the conformance suite (internal/storetest/conformance) on the Redis
// store: contention, monitoring, middleware admissions, clock steps (Options.Clock), the paced
// Transport, Redis stopped and restarted, paused (CLIENT PAUSE) and its scripts flushed under
// SendUncounted and SendNothing, and 4 processes sharing the server with one killed.
func TestConformance(t *testing.T) {
	var srv *redistest.Server
	addr := ""
	if w := conformance.Where(); w != "" {
		addr = w // a worker of the processes case: the parent's server
	} else {
		srv = redistest.Start(t)
		addr = srv.Addr
	}
	open := func(t testing.TB, addr string, clk clock.Clock) conformance.Store {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
		t.Cleanup(func() { c.Close() })
		timeout := conformanceTimeout
		if clk != nil {
			timeout = 10 * time.Second // manual-clock cases: 64 goroutines under -race, no fault
		}
		st, err := New(c, Options{Clock: clk, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	conformance.Run(t, conformance.Target{
		Name:  "redis",
		Open:  func(t testing.TB, clk clock.Clock) conformance.Store { return open(t, addr, clk) },
		Stop:  func(testing.TB) { srv.Stop() },
		Start: func(testing.TB) { srv.Restart() },
		Pause: func(t testing.TB, d time.Duration) {
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			if err := c.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds()).Err(); err != nil {
				t.Errorf("CLIENT PAUSE: %v", err)
			}
		},
		FlushScripts: func(t testing.TB) {
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			if err := c.ScriptFlush(context.Background()).Err(); err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
			}
		},
		Shared:     func(testing.TB) string { return addr },
		OpenShared: func(t testing.TB, where string) conformance.Store { return open(t, where, nil) },
	})
}

package redisstore

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestOperationWithinTimeoutWhilePolicyCheckHangs (regression, issue 14): README: "Each operation is bounded by
// Options.Timeout (100 ms by default)". A server that hangs (accepts, never answers) when New
// runs leaves the eviction-policy check pending; once a second an operation starts the check
// again, which used to run on its time (gate → checkPolicy, its own Options.Timeout) before
// the script (another Options.Timeout): that operation took twice the timeout. Now the check
// runs in the background, and no operation takes more than Timeout + half of it.
func TestOperationWithinTimeoutWhilePolicyCheckHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	defer c.Close()
	// 1 s, so that a loaded machine's scheduling delay (150 ms seen at 500 ms) stays well
	// inside the margin of half a second between one timeout (right) and two (the defect: the
	// check, then the operation).
	const timeout = time.Second
	st, err := New(c, Options{Timeout: timeout, CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: time.Minute})
	var worst time.Duration
	for range 3 {
		time.Sleep(policyRecheck + 50*time.Millisecond)
		start := time.Now()
		_, err := st.Reserve(context.Background(), s, "k", 1)
		d := time.Since(start)
		worst = max(worst, d)
		t.Logf("Reserve after %v: took %v: %v", policyRecheck, d, err)
	}
	if worst > timeout+timeout/2 {
		t.Errorf("an operation took %v, Options.Timeout is %v", worst, timeout)
	}
}

package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/internal/redisfleet"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest/conformance"
)

// TestSentinelKeepsEveryPromise runs, on a Sentinel set of its own (a master, a replica, three sentinels),
// the conformance suite and the lost-reply case through a FailoverClient (errors name the
// master's address, not go-redis's "FailoverClient"), then a stream of Records across a
// SENTINEL FAILOVER (at most sentinelErrors failures in all, a success within recoverBound
// of the new master being in place) and a kill -9 of the master (a success within
// recoverBound, and no failure from recoverWithin after it on: steady). After a kill -9, go-redis's pool
// refuses to dial for up to 1 s once PoolSize dials have failed, answering with the last dial
// error (internal/pool/pool.go: dialErrorsNum, tryDial), so failures may go on for that long
// after a first success on a connection made before the kill.
func TestSentinelKeepsEveryPromise(t *testing.T) {
	if w := conformance.Where(); w != "" { // a worker of the suite's processes case
		conformance.Run(t, sentinelTarget(nil, strings.Split(w, ",")))
		return
	}
	ss := redisfleet.StartSentinel(t)
	t.Cleanup(func() { time.Sleep(1100 * time.Millisecond) }) // see TestClusterFailoverCallersRecover
	t.Run("conformance", func(t *testing.T) { conformance.Run(t, sentinelTarget(ss, ss.SentinelAddrs())) })
	t.Run("lostreply", func(t *testing.T) {
		e := &replyEater{}
		c := ss.FailoverClient(func(o *redis.FailoverOptions) { o.Dialer = e.dial })
		st, err := New(c, Options{Timeout: 2 * time.Second, CheckInterval: -1}) // no monitor: its heartbeat is a script too
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"lost-a", "lost-b", "lost-c"} {
			checkLostReply(t, st, e, k, ss.Master())
		}
	})
	t.Run("failover", func(t *testing.T) { sentinelFailover(t, ss) })
}

// openSentinel returns a store over a new FailoverClient of the sentinels at addrs (closed
// when t ends), with the suite's timeouts.
func openSentinel(t testing.TB, addrs []string, clk clock.Clock) *Store {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redisfleet.MasterName, SentinelAddrs: addrs,
		MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	timeout := conformanceTimeout
	if clk != nil {
		timeout = 10 * time.Second
	}
	st, err := New(c, Options{Clock: clk, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// sentinelTarget is the suite's target on the Sentinel set: SCRIPT FLUSH of the master (a
// restart is a failover, tested apart; CLIENT PAUSE of the one master is the single node's
// case, which TestConformance runs, and is left out to keep the package's run short).
func sentinelTarget(ss *redisfleet.Sentinel, addrs []string) conformance.Target {
	master := func(t testing.TB, do func(c *redis.Client) error) {
		c := redis.NewClient(&redis.Options{Addr: ss.Master()})
		defer c.Close()
		if err := do(c); err != nil {
			t.Errorf("master %s: %v", c.Options().Addr, err)
		}
	}
	return conformance.Target{
		Name: "redis-sentinel",
		// Half the manual-clock rounds, 16 goroutines a key: the scripts are judged in full on
		// a single node (TestConformance); here it is the client kind, and the package's run
		// stays near a minute.
		Slow: 2,
		Open: func(t testing.TB, clk clock.Clock) conformance.Store { return openSentinel(t, addrs, clk) },
		FlushScripts: func(t testing.TB) {
			master(t, func(c *redis.Client) error { return c.ScriptFlush(context.Background()).Err() })
		},
		Shared: func(testing.TB) string { return strings.Join(addrs, ",") },
		OpenShared: func(t testing.TB, where string) conformance.Store {
			return openSentinel(t, strings.Split(where, ","), nil)
		},
	}
}

// sentinelErrors bounds the failures a SENTINEL FAILOVER may cause on a key.
const sentinelErrors = 3

func sentinelFailover(t *testing.T, ss *redisfleet.Sentinel) {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redisfleet.MasterName, SentinelAddrs: ss.SentinelAddrs(),
		MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	st, err := New(c, Options{Timeout: failoverTimeout})
	if err != nil {
		t.Fatal(err)
	}
	s := lostReplyStrategy(t)
	keys := []string{"sentinel-a", "sentinel-b"}
	sm := startStream(st, s, keys)
	defer sm.end()
	time.Sleep(300 * time.Millisecond)
	for _, fault := range []struct {
		name     string
		do       func() (string, string, time.Time)
		graceful bool
	}{{"SENTINEL FAILOVER", ss.SentinelFailover, true}, {"kill -9", ss.KillMaster, false}} {
		start := time.Now()
		from, to, healthy := fault.do()
		t.Logf("%s %s → %s: new master in place %v later", fault.name, from, to, healthy.Sub(start).Round(time.Millisecond))
		took := recovery(t, sm, keys[0], healthy, fault.name)
		for _, k := range keys {
			before, n := sm.failures(k, start, healthy)
			after, m := sm.failures(k, healthy, healthy.Add(max(took, 0)+time.Millisecond))
			t.Logf("%s: key %q: %d of %d operations failed before the new master was in place, %d of %d after", fault.name, k, len(before), n, len(after), m)
			if fault.graceful && len(before)+len(after) > sentinelErrors {
				t.Errorf("%s: key %q: %d operations failed; first: %v", fault.name, k, len(before)+len(after), append(before, after...)[0].err)
			}
		}
		if !fault.graceful {
			steady(t, sm, keys, healthy, took, fault.name)
		}
		if !strings.Contains(st.route.addr(), to) {
			t.Errorf("%s: the store names %q as the master, want %s", fault.name, st.route.addr(), to)
		}
	}
	sm.logCounts(t, st, s, keys)
}

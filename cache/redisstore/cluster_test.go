package redisstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/internal/redisfleet"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest/conformance"
)

// TestClusterKeepsEveryPromise runs, on one Redis Cluster (3 masters, 3 replicas) shared by its cases, the
// conformance suite, the lost-reply case on a key of each master, MaxInFlight per master, and
// a slot migration during a run (last: it moves a slot).
func TestClusterKeepsEveryPromise(t *testing.T) {
	if w := conformance.Where(); w != "" { // a worker of the suite's processes case
		conformance.Run(t, clusterTarget(nil, strings.Split(w, ",")))
		return
	}
	cl := redisfleet.StartCluster(t)
	t.Run("conformance", func(t *testing.T) { conformance.Run(t, clusterTarget(cl, cl.Addrs())) })
	t.Run("lostreply", func(t *testing.T) { clusterLostReply(t, cl) })
	t.Run("inflight", func(t *testing.T) { clusterInFlight(t, cl) })
	t.Run("leases", func(t *testing.T) { clusterLeases(t, cl) })
	t.Run("limits", func(t *testing.T) { checkLimits(t, openCluster(t, cl.Addrs(), nil)) })
	t.Run("migration", func(t *testing.T) { clusterMigration(t, cl) })
}

// openCluster returns a store over a new Cluster client of addrs (closed when t ends), with
// the suite's timeouts.
func openCluster(t testing.TB, addrs []string, clk clock.Clock) *Store {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DialerRetries: 1})
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

// clusterTarget is the suite's target on the cluster: its faults are CLIENT PAUSE of every
// master at once and SCRIPT FLUSH on every master (a restart is a failover, tested apart).
func clusterTarget(cl *redisfleet.Cluster, addrs []string) conformance.Target {
	each := func(t testing.TB, do func(c *redis.Client) error) {
		var wg sync.WaitGroup
		for _, m := range cl.Masters() {
			wg.Go(func() {
				c := redis.NewClient(&redis.Options{Addr: m})
				defer c.Close()
				if err := do(c); err != nil {
					t.Errorf("%s: %v", m, err)
				}
			})
		}
		wg.Wait()
	}
	return conformance.Target{
		Name: "redis-cluster",
		// Half the manual-clock rounds, 16 goroutines a key: the scripts are judged in full on
		// a single node (TestConformance); here it is the client kind, and the package's run
		// stays near a minute.
		Slow: 2,
		Open: func(t testing.TB, clk clock.Clock) conformance.Store { return openCluster(t, addrs, clk) },
		Pause: func(t testing.TB, d time.Duration) {
			each(t, func(c *redis.Client) error {
				return c.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds()).Err()
			})
		},
		FlushScripts: func(t testing.TB) {
			each(t, func(c *redis.Client) error { return c.ScriptFlush(context.Background()).Err() })
		},
		Shared: func(testing.TB) string { return strings.Join(addrs, ",") },
		OpenShared: func(t testing.TB, where string) conformance.Store {
			return openCluster(t, strings.Split(where, ","), nil)
		},
	}
}

// keysPerMaster returns, for each master of cl, a logical key (prefix-<i>) whose Redis keys
// it serves, under st.
func keysPerMaster(t *testing.T, cl *redisfleet.Cluster, st *Store, prefix string) map[string]string {
	t.Helper()
	s := lostReplyStrategy(t)
	masters := cl.Masters()
	found := map[string]string{}
	for i := 0; len(found) < len(masters) && i < 1000; i++ {
		key := prefix + "-" + itoa(i)
		m := cl.MasterOf(slotOf(st.Keys(s, key)[0]))
		if _, ok := found[m]; !ok {
			found[m] = key
		}
	}
	if len(found) != len(masters) {
		t.Fatalf("no key for each of the masters %v: %v", masters, found)
	}
	return found
}

// clusterLostReply: a Record whose reply is lost after the script ran fails, naming the
// master, and counts once, on a key of each master, through a Cluster client with go-redis's
// defaults (MaxRedirects 3, which go-redis also spends on EOF: issue 14, defect 1).
func clusterLostReply(t *testing.T, cl *redisfleet.Cluster) {
	e := &replyEater{}
	c := cl.ClusterClient(func(o *redis.ClusterOptions) { o.Dialer = e.dial })
	st, err := New(c, Options{Timeout: 2 * time.Second, CheckInterval: -1}) // no monitor: its heartbeat is a script too
	if err != nil {
		t.Fatal(err)
	}
	for m, key := range keysPerMaster(t, cl, st, "lost") {
		checkLostReply(t, st, e, key, m)
	}
}

// clusterInFlight: MaxInFlight is per master. With MaxInFlight 1 and one master paused
// (CLIENT PAUSE 600 ms) while an operation on it is in flight, an operation on another master
// succeeds at once, and a second one on the paused master gives up waiting for its turn, with
// an error naming that master (issue 14, defect 6).
func clusterInFlight(t *testing.T, cl *redisfleet.Cluster) {
	c := cl.ClusterClient(nil)
	st, err := New(c, Options{Timeout: 3 * time.Second, MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := lostReplyStrategy(t)
	keys := keysPerMaster(t, cl, st, "inflight")
	masters := cl.Masters()
	paused, other := masters[0], masters[1]
	ctx := context.Background()
	for _, k := range keys { // slot map loaded, scripts cached
		if err := st.Record(ctx, s, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	pc := redis.NewClient(&redis.Options{Addr: paused})
	defer pc.Close()
	if err := pc.Do(ctx, "CLIENT", "PAUSE", 600).Err(); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { held <- st.Record(ctx, s, keys[paused], 1) }()
	time.Sleep(100 * time.Millisecond) // the held Record has its master's one turn
	octx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := st.Record(octx, s, keys[other], 1); err != nil {
		t.Errorf("Record on %s while %s is paused: %v (MaxInFlight must be per master)", other, paused, err)
	}
	pctx, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	err = st.Record(pctx, s, keys[paused], 1)
	if err == nil || !strings.Contains(err.Error(), "gave up waiting for a connection's turn (MaxInFlight 1)") ||
		!strings.Contains(err.Error(), " at "+paused+":") {
		t.Errorf("second Record on the paused %s: %v, want it to give up waiting for the master's turn, naming it", paused, err)
	}
	if err := <-held; err != nil {
		t.Errorf("the Record held by the pause: %v", err)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// slotOf is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its {hash tag} (or of the
// whole key without one) mod 16384 (Redis Cluster spec, "Keys distribution model").
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

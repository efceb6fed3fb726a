package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
)

// freePort returns a loopback port free now (the server started on it may lose it to another
// test's; the helpers' readiness checks then fail the test rather than hang).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// twoMasterCluster starts a Redis Cluster of two masters (slots 0–8191 and 8192–16383, no
// replicas) and returns their addresses, once both report cluster_state:ok.
func twoMasterCluster(t *testing.T) []*redistest.Server {
	t.Helper()
	var nodes []*redistest.Server
	var buses []string
	for range 2 {
		bus := freePort(t)
		nodes = append(nodes, redistest.StartWith(t, "--cluster-enabled", "yes", "--cluster-port", bus,
			"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"), "--cluster-node-timeout", "2000"))
		buses = append(buses, bus)
	}
	ctx := context.Background()
	a, b := nodes[0].Client(), nodes[1].Client()
	host, port, _ := net.SplitHostPort(nodes[1].Addr)
	for _, cmd := range [][]any{
		{"CLUSTER", "ADDSLOTSRANGE", 0, 8191},
		{"CLUSTER", "MEET", host, port, buses[1]},
	} {
		if err := a.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(cmd, err)
		}
	}
	if err := b.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 8192, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ia, _ := a.ClusterInfo(ctx).Result()
		ib, _ := b.ClusterInfo(ctx).Result()
		if strings.Contains(ia, "cluster_state:ok") && strings.Contains(ib, "cluster_state:ok") &&
			strings.Contains(ia, "cluster_known_nodes:2") && strings.Contains(ib, "cluster_known_nodes:2") {
			return nodes
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ok within 10 s:\n%s\n%s", ia, ib)
		}
	}
}

// TestClusterPolicyCheckedOnEveryMaster: over a ClusterClient, New asks every master: one master with an
// evicting policy is refused by its address; with AllowEviction the stores count each other
// through the one fleet set, and the monitor watches both masters.
func TestClusterPolicyCheckedOnEveryMaster(t *testing.T) {
	nodes := twoMasterCluster(t)
	ctx := context.Background()
	evicting := nodes[1]
	// Not 2 MB: a cluster node uses more than that idle, and would evict the fleet set at once.
	if err := evicting.Client().ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := evicting.Client().ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer cc.Close()
	if _, err := New(cc, Options{Timeout: 5 * time.Second}); err == nil || err.Error() != refusalTextOf(evicting.Addr, 100<<20, "allkeys-lru") {
		t.Fatalf("New over the cluster: %v", err)
	}
	const interval = minCheckInterval
	a := newStore(t, cc, Options{AllowEviction: true, CheckInterval: interval})
	defer a.Close()
	b := newStore(t, cc, Options{AllowEviction: true, CheckInterval: interval})
	waitFor(t, "2 processes", func() bool { return a.Processes() == 2 && b.Processes() == 2 })
	b.Close()
	waitFor(t, "1 process", func() bool { return a.Processes() == 1 })
	a.mon.seenMu.Lock()
	seen := len(a.mon.seen)
	a.mon.seenMu.Unlock()
	if seen != 2 {
		t.Errorf("monitor watches %d masters, want 2", seen)
	}
}

// TestSentinelRefusalNamesMasterAddress: over a Sentinel FailoverClient, whose options name no address
// ("FailoverClient"), the refusal names the master's real address (CLIENT INFO's laddr).
func TestSentinelRefusalNamesMasterAddress(t *testing.T) {
	master := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "volatile-lru")
	_, mport, _ := net.SplitHostPort(master.Addr)
	port, dir := freePort(t), t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor m 127.0.0.1 %s 1\n", port, dir, mport), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:" + port},
		MaxRetries: -1, ContextTimeoutEnabled: true})
	defer fc.Close()
	for deadline := time.Now().Add(10 * time.Second); fc.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no master through the sentinel within 10 s")
		}
	}
	if _, err := New(fc, Options{Timeout: 5 * time.Second}); err == nil || err.Error() != refusalText(master.Addr, "volatile-lru") {
		t.Fatalf("New over Sentinel: %v", err)
	}
}

package redisfleet

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of 3 masters and 3 replicas on 127.0.0.1, owned by one test (or
// shared by a package's tests that do not break it). Node timeout 2 s, no persistence.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*Proc // the six, in creation order: masters first (redis-cli's choice)
}

// clusterNodeTimeout is cluster-node-timeout: how long a master may be silent before its
// peers fail it over (kill -9 → healthy again in about this plus a second).
const clusterNodeTimeout = 2000 * time.Millisecond

// StartCluster starts six redis-server in cluster mode, each in a folder of its own under
// t.TempDir() (fresh nodes.conf), joins them with `redis-cli --cluster create --cluster-replicas
// 1`, and returns once every node reports cluster_state:ok, agrees on who serves all 16384 slots,
// and each of the three replicas has its replication link up. The servers are killed when the
// test ends. Ports lost to another package's server are tried again, up to 5 times.
// Skipped (or failed, with RATEMONITOR_REQUIRE_REDIS=1) without redis-server and redis-cli.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	NeedRedis(t, "redis-cli")
	var last error
	for range 5 {
		c := &Cluster{t: t}
		if last = c.start(t.TempDir()); last == nil {
			t.Cleanup(c.stop)
			return c
		}
		c.stop()
	}
	t.Fatal(last)
	return nil
}

func (c *Cluster) start(dir string) error {
	ports, err := FreePorts(12) // a client port and a cluster bus port per node
	if err != nil {
		return err
	}
	addrs := make([]string, 6)
	for i := range 6 {
		p := &Proc{Addr: "127.0.0.1:" + strconv.Itoa(ports[i])}
		addrs[i] = p.Addr
		nodeDir := filepath.Join(dir, strconv.Itoa(i))
		if err := mkdir(nodeDir); err != nil {
			return err
		}
		c.nodes = append(c.nodes, p)
		if err := p.Start("--port", strconv.Itoa(ports[i]), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(ports[6+i]),
			"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout.Milliseconds())),
			"--save", "", "--appendonly", "no", "--dir", nodeDir,
			// A replica's first sync (diskless, as --save '' makes it) waits 5 s by default
			// for more replicas to share it.
			"--repl-diskless-sync-delay", "0"); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create %s: %v\n%s", strings.Join(addrs, " "), err, out)
	}
	if _, ok := poll(20*time.Second, c.ready); !ok {
		return fmt.Errorf("cluster %s: not ok with three replicas attached within 20 s", strings.Join(addrs, " "))
	}
	return nil
}

// ready reports whether the cluster is healthy, each master has a replica whose link is up,
// and every node knows all six with their roles (a manual failover asked of a replica its
// master does not know yet as such is ignored).
func (c *Cluster) ready() bool {
	if !c.healthy() {
		return false
	}
	up := 0
	for _, p := range c.live() {
		rc := p.client()
		info, err := rc.Info(context.Background(), "replication").Result()
		nodes, err2 := rc.ClusterNodes(context.Background()).Result()
		rc.Close()
		if err != nil || err2 != nil {
			return false
		}
		if field(info, "role") == "slave" && field(info, "master_link_status") == "up" {
			up++
		}
		masters, replicas := 0, 0
		for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || f[7] != "connected" || strings.Contains(f[2], "fail") || strings.Contains(f[2], "handshake") {
				return false
			}
			switch {
			case strings.Contains(f[2], "master"):
				masters++
			case strings.Contains(f[2], "slave") && f[3] != "-":
				replicas++
			}
		}
		if masters != 3 || replicas != 3 {
			return false
		}
	}
	return up == 3
}

func (c *Cluster) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		p.Kill()
	}
}

// live returns the nodes not killed.
func (c *Cluster) live() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []*Proc
	for _, p := range c.nodes {
		if p.alive() {
			ps = append(ps, p)
		}
	}
	return ps
}

// Addrs returns the six nodes' addresses (killed ones included), the seeds for a client.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	addrs := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		addrs[i] = p.Addr
	}
	return addrs
}

// ClusterClient returns a client of the cluster set as the store needs (no retries, context
// deadlines honoured, one dial attempt), after edit (if not nil) has changed its options (a
// Dialer, say); it is closed when the test ends.
func (c *Cluster) ClusterClient(edit func(*redis.ClusterOptions)) *redis.ClusterClient {
	opts := &redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}
	if edit != nil {
		edit(opts)
	}
	cc := redis.NewClusterClient(opts)
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

// slotMap is one node's view: slot → master address.
type slotMap map[int]string

func (c *Cluster) slots(p *Proc) (slotMap, error) {
	rc := p.client()
	defer rc.Close()
	ranges, err := rc.ClusterSlots(context.Background()).Result()
	if err != nil {
		return nil, err
	}
	m := slotMap{}
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		for s := r.Start; s <= r.End; s++ {
			m[int(s)] = r.Nodes[0].Addr
		}
	}
	return m, nil
}

// healthy: every live node says cluster_state:ok and maps all 16384 slots to the same live
// masters. (cluster_state alone stays ok while a dead master is only suspected, PFAIL.)
func (c *Cluster) healthy() bool {
	live := c.live()
	var first slotMap
	for _, p := range live {
		rc := p.client()
		info, err := rc.ClusterInfo(context.Background()).Result()
		rc.Close()
		if err != nil || field(info, "cluster_state") != "ok" {
			return false
		}
		m, err := c.slots(p)
		if err != nil || len(m) != 16384 {
			return false
		}
		if first == nil {
			first = m
			for _, addr := range m {
				if !slices.ContainsFunc(live, func(q *Proc) bool { return q.Addr == addr }) {
					return false
				}
			}
			continue
		}
		for s, addr := range m {
			if first[s] != addr {
				return false
			}
		}
	}
	return first != nil
}

// WaitHealthy waits (up to 30 s, else the test fails) until the cluster is healthy: every live
// node reports cluster_state:ok and all of them map every slot to the same live master. It
// returns the instant that was first seen (polled every 10 ms).
func (c *Cluster) WaitHealthy() time.Time {
	c.t.Helper()
	at, ok := poll(30*time.Second, c.healthy)
	if !ok {
		c.t.Fatalf("cluster %v: not healthy within 30 s", c.Addrs())
	}
	return at
}

// MasterOf returns the address of the master that serves slot, as a live node sees it.
func (c *Cluster) MasterOf(slot int) string {
	c.t.Helper()
	for _, p := range c.live() {
		if m, err := c.slots(p); err == nil && m[slot] != "" {
			return m[slot]
		}
	}
	c.t.Fatalf("cluster %v: no live node knows slot %d's master", c.Addrs(), slot)
	return ""
}

// Masters returns the addresses of the masters that serve slots, sorted.
func (c *Cluster) Masters() []string {
	c.t.Helper()
	seen := map[string]bool{}
	for _, p := range c.live() {
		if m, err := c.slots(p); err == nil {
			for _, addr := range m {
				seen[addr] = true
			}
			break
		}
	}
	var addrs []string
	for a := range seen {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return addrs
}

// Slot returns key's hash slot (CLUSTER KEYSLOT).
func (c *Cluster) Slot(key string) int {
	c.t.Helper()
	rc := c.live()[0].client()
	defer rc.Close()
	s, err := rc.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return int(s)
}

// KillMaster sends SIGKILL to the master serving slot and returns its address. Its replica
// is promoted after the node timeout (2 s) and the failure's spread; see WaitHealthy.
func (c *Cluster) KillMaster(slot int) string {
	c.t.Helper()
	addr := c.MasterOf(slot)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		if p.Addr == addr {
			p.Kill()
		}
	}
	return addr
}

// nodeID returns the node's CLUSTER MYID.
func (c *Cluster) nodeID(addr string) (string, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	return rc.Do(context.Background(), "CLUSTER", "MYID").Text()
}

// replicaOf returns the address of a live replica of the master at addr.
func (c *Cluster) replicaOf(addr string) (string, error) {
	id, err := c.nodeID(addr)
	if err != nil {
		return "", err
	}
	for _, p := range c.live() {
		rc := p.client()
		info, err := rc.Info(context.Background(), "replication").Result()
		rc.Close()
		if err != nil || field(info, "role") != "slave" {
			continue
		}
		rc = p.client()
		nodes, err := rc.ClusterNodes(context.Background()).Result()
		rc.Close()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(nodes, "\n") {
			if f := strings.Fields(line); len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == id {
				return p.Addr, nil
			}
		}
	}
	return "", fmt.Errorf("no live replica of %s (%s)", addr, id)
}

// Failover runs CLUSTER FAILOVER (the graceful, coordinated kind) on the replica of the master
// serving slot and returns the old and new master's addresses once the replica serves slot in
// every live node's view. The test fails if that takes over 20 s.
func (c *Cluster) Failover(slot int) (from, to string) {
	c.t.Helper()
	from = c.MasterOf(slot)
	to, err := c.replicaOf(from)
	if err != nil {
		c.t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: to, MaxRetries: -1})
	defer rc.Close()
	// A manual failover the master does not answer within 5 s (CLUSTER_MF_TIMEOUT) is
	// dropped, silently: ask again then.
	var asked time.Time
	if _, ok := poll(20*time.Second, func() bool {
		if time.Since(asked) > 5*time.Second {
			if err := rc.Do(context.Background(), "CLUSTER", "FAILOVER").Err(); err != nil {
				c.t.Fatalf("CLUSTER FAILOVER on %s: %v", to, err)
			}
			asked = time.Now()
		}
		if !c.healthy() {
			return false
		}
		m, err := c.slots(c.live()[0])
		return err == nil && m[slot] == to
	}); !ok {
		m, _ := c.slots(c.live()[0])
		c.t.Fatalf("CLUSTER FAILOVER on %s: it does not serve slot %d within 20 s (healthy %v, served by %s)", to, slot, c.healthy(), m[slot])
	}
	return from, to
}

// Migration stages, passed to MigrateSlot's hook.
const (
	Migrating = "migrating" // IMPORTING/MIGRATING set, no key moved yet
	Moved     = "moved"     // the keys moved to the target, slot still MIGRATING (ASK)
	Done      = "done"      // SETSLOT NODE everywhere: the target owns the slot (MOVED)
)

// MigrateSlot moves slot to the master at to, step by step as redis-cli --cluster reshard
// does: CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the source, MIGRATE of every key
// (CLUSTER GETKEYSINSLOT, 100 at a time), then SETSLOT NODE on the target, the source and the
// other masters. hook, if not nil, is called at each stage (Migrating, Moved, Done) and may act
// (sleep, run operations) before the migration goes on.
func (c *Cluster) MigrateSlot(slot int, to string, hook func(stage string)) error {
	ctx := context.Background()
	from := c.MasterOf(slot)
	if from == to {
		return fmt.Errorf("slot %d is already on %s", slot, to)
	}
	fromID, err := c.nodeID(from)
	if err != nil {
		return err
	}
	toID, err := c.nodeID(to)
	if err != nil {
		return err
	}
	src := redis.NewClient(&redis.Options{Addr: from, MaxRetries: -1})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to, MaxRetries: -1})
	defer dst.Close()
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", to, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", from, err)
	}
	if hook != nil {
		hook(Migrating)
	}
	host, port, _ := strings.Cut(to, ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT on %s: %w", from, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil && !errors.Is(err, redis.Nil) && err.Error() != "NOKEY" {
			return fmt.Errorf("MIGRATE from %s to %s: %w", from, to, err)
		}
	}
	if hook != nil {
		hook(Moved)
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
		return fmt.Errorf("SETSLOT NODE on %s: %w", to, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
		return fmt.Errorf("SETSLOT NODE on %s: %w", from, err)
	}
	for _, m := range c.Masters() {
		if m != from && m != to {
			mc := redis.NewClient(&redis.Options{Addr: m, MaxRetries: -1})
			err := mc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
			mc.Close()
			if err != nil {
				return fmt.Errorf("SETSLOT NODE on %s: %w", m, err)
			}
		}
	}
	if hook != nil {
		hook(Done)
	}
	return nil
}

package redisfleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of StartSentinel monitor.
const MasterName = "ratemonitor"

// Sentinel is a master, a replica and three sentinels (quorum 2) on 127.0.0.1, owned by one
// test. The sentinels deem the master down after 1 s of silence.
type Sentinel struct {
	t         testing.TB
	mu        sync.Mutex
	servers   []*Proc // the master and the replica, in start order (roles change)
	sentinels []*Proc
}

// StartSentinel starts the master, a replica of it and three sentinels (`redis-server FILE
// --sentinel`, down-after-milliseconds 1000, failover-timeout 5000), and returns once the
// replica's link is up and every sentinel knows the replica and the other two sentinels (so
// that a kill -9 reaches the quorum). Everything is killed when the test ends. Ports lost to
// another package's server are tried again, up to 5 times.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	NeedRedis(t)
	var last error
	for range 5 {
		s := &Sentinel{t: t}
		if last = s.start(t.TempDir()); last == nil {
			t.Cleanup(s.stop)
			return s
		}
		s.stop()
	}
	t.Fatal(last)
	return nil
}

func (s *Sentinel) start(dir string) error {
	ports, err := FreePorts(5)
	if err != nil {
		return err
	}
	for i := range 2 {
		p := &Proc{Addr: "127.0.0.1:" + strconv.Itoa(ports[i])}
		s.servers = append(s.servers, p)
		args := []string{"--port", strconv.Itoa(ports[i]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--repl-diskless-sync-delay", "0"}
		if i == 1 {
			args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(ports[0]))
		}
		if err := p.Start(args...); err != nil {
			return err
		}
	}
	for i := range 3 {
		p := &Proc{Addr: "127.0.0.1:" + strconv.Itoa(ports[2+i])}
		s.sentinels = append(s.sentinels, p)
		// Each sentinel rewrites its own file (what it learnt), so one file each.
		file := filepath.Join(dir, "sentinel"+strconv.Itoa(i)+".conf")
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %q\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[3]s 1000\n"+
			"sentinel failover-timeout %[3]s 5000\n"+
			"sentinel parallel-syncs %[3]s 1\n", ports[2+i], dir, MasterName, ports[0])
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			return err
		}
		if err := p.Start(file, "--sentinel"); err != nil {
			return err
		}
	}
	if _, ok := poll(20*time.Second, s.ready); !ok {
		return fmt.Errorf("sentinels %v: the replica and the other sentinels not known within 20 s", s.SentinelAddrs())
	}
	return nil
}

// ready: the replica's link is up, and every sentinel sees one replica and two other sentinels.
func (s *Sentinel) ready() bool {
	rc := s.servers[1].client()
	info, err := rc.Info(context.Background(), "replication").Result()
	rc.Close()
	if err != nil || field(info, "master_link_status") != "up" {
		return false
	}
	for _, p := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
		m, err := sc.Master(context.Background(), MasterName).Result()
		sc.Close()
		if err != nil || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
			return false
		}
	}
	return true
}

func (s *Sentinel) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range append(s.sentinels, s.servers...) {
		p.Kill()
	}
}

// SentinelAddrs returns the three sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	var addrs []string
	for _, p := range s.sentinels {
		addrs = append(addrs, p.Addr)
	}
	return addrs
}

// FailoverClient returns a Sentinel-backed client of the master set as the store needs (no
// retries, context deadlines honoured, one dial attempt), after edit (if not nil) has changed
// its options; it is closed when the test ends.
func (s *Sentinel) FailoverClient(edit func(*redis.FailoverOptions)) *redis.Client {
	opts := &redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.SentinelAddrs(),
		MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}
	if edit != nil {
		edit(opts)
	}
	c := redis.NewFailoverClient(opts)
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Master returns the master's address as the first sentinel that answers sees it.
func (s *Sentinel) Master() string {
	s.t.Helper()
	for _, p := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(context.Background(), MasterName).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1]
		}
	}
	s.t.Fatalf("sentinels %v: none names the master", s.SentinelAddrs())
	return ""
}

// promoted: every sentinel names a master other than old, and that server says role:master.
func (s *Sentinel) promoted(old string) bool {
	var addr string
	for _, p := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(context.Background(), MasterName).Result()
		sc.Close()
		if err != nil || len(a) != 2 || a[0]+":"+a[1] == old || addr != "" && a[0]+":"+a[1] != addr {
			return false
		}
		addr = a[0] + ":" + a[1]
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "replication").Result()
	return err == nil && field(info, "role") == "master"
}

// SentinelFailover runs SENTINEL FAILOVER (no agreement needed) on the first sentinel and
// returns the old and new master's addresses and the instant every sentinel named the new
// master and it said role:master. The test fails after 20 s.
func (s *Sentinel) SentinelFailover() (from, to string, at time.Time) {
	s.t.Helper()
	from = s.Master()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[0].Addr, MaxRetries: -1})
	defer sc.Close()
	if err := sc.Failover(context.Background(), MasterName).Err(); err != nil {
		s.t.Fatalf("SENTINEL FAILOVER on %s: %v", s.sentinels[0].Addr, err)
	}
	to, at = s.waitPromoted(from)
	return from, to, at
}

func (s *Sentinel) waitPromoted(from string) (string, time.Time) {
	s.t.Helper()
	at, ok := poll(20*time.Second, func() bool { return s.promoted(from) })
	if !ok {
		s.t.Fatalf("sentinels %v: no new master in place of %s within 20 s", s.SentinelAddrs(), from)
	}
	return s.Master(), at
}

// KillMaster sends SIGKILL to the master, waits until the sentinels have promoted the replica
// (down after 1 s, then the quorum and the election), and returns the old and new master's
// addresses and the instant the new master was in place (as SentinelFailover).
func (s *Sentinel) KillMaster() (from, to string, at time.Time) {
	s.t.Helper()
	from = s.Master()
	s.mu.Lock()
	for _, p := range s.servers {
		if p.Addr == from {
			p.Kill()
		}
	}
	s.mu.Unlock()
	to, at = s.waitPromoted(from)
	return from, to, at
}

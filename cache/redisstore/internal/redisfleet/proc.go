// Package redisfleet starts the Redis deployments of several servers for the Redis store's tests:
// a Cluster of 3 masters and 3 replicas (StartCluster) and a Sentinel set (StartSentinel), and
// the redis-server process (Proc) that redistest's Server runs. Its users import redistest too,
// which silences go-redis's logger.
package redisfleet

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NeedRedis skips the test without redis-server and redis-cli on PATH, or fails it when
// RATEMONITOR_REQUIRE_REDIS=1 (as in CI).
func NeedRedis(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range append([]string{"redis-server"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			msg := tool + " is not on PATH; install it (Debian: apt-get install -y redis-server, which brings redis-cli) to run the Redis tests"
			if os.Getenv("RATEMONITOR_REQUIRE_REDIS") == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// FreePorts returns n distinct loopback ports that were free a moment ago (all listeners are
// held until every port is chosen, so they differ). Another process may still take one before
// a server binds it: callers check that the server answering is theirs (see Proc.Start).
func FreePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Proc is one redis-server (or sentinel) process.
type Proc struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Start runs redis-server with args and waits until addr answers with this process's id
// (INFO server's process_id): a port lost to another package's server is an error, which the
// caller answers by trying other ports.
func (p *Proc) Start(args ...string) error {
	p.cmd = exec.Command("redis-server", args...)
	if err := p.cmd.Start(); err != nil {
		p.cmd = nil
		return fmt.Errorf("redis-server: %w", err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(p.cmd, p.done)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	want := "process_id:" + strconv.Itoa(p.cmd.Process.Pid) + "\r\n"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		select {
		case <-p.done: // a port of its own taken (the cluster bus port, say)
			return fmt.Errorf("redis-server for %s exited at start: %s", p.Addr, p.cmd.ProcessState)
		default:
		}
		// A plain dial first: go-redis logs every refused dial.
		if conn, err := net.DialTimeout("tcp", p.Addr, time.Second); err != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("redis-server on %s did not answer within 10 s: %w", p.Addr, err)
			}
			continue
		} else {
			conn.Close()
		}
		if info, err := c.Info(context.Background(), "server").Result(); err == nil {
			if strings.Contains(info, want) {
				return nil
			}
			return fmt.Errorf("redis-server on %s: another server answers there", p.Addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer within 10 s", p.Addr)
		}
	}
}

// Kill sends SIGKILL (kill -9: no shutdown, no last words to peers) and waits for the exit.
// It is safe to call twice.
func (p *Proc) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

func (p *Proc) alive() bool { return p.cmd != nil }

// client returns a plain client for admin commands (no retries), which the caller closes.
func (p *Proc) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialerRetries: 1, ReadTimeout: 2 * time.Second})
}

// field returns the value of name in an INFO-style reply ("name:value" lines), or "".
func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// poll calls ok every 10 ms until it returns true or d passes, and returns the instant it did.
func poll(d time.Duration, ok func() bool) (time.Time, bool) {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if ok() {
			return time.Now(), true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
	}
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }

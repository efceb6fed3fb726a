// Package redistest starts a real redis-server for tests, on a free loopback port, with no
// persistence.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process owned by one test.
type Server struct {
	Addr string
	t    testing.TB
	cmd  *exec.Cmd
	port string
	args []string // extra redis-server arguments (StartWith)
}

// Start runs redis-server from PATH and stops it when the test ends. Without redis-server the
// test is skipped, or fails when RATEMONITOR_REQUIRE_REDIS=1 (as in CI).
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t)
}

// StartWith is Start with extra redis-server arguments, such as "--maxmemory", "2mb",
// "--maxmemory-policy", "allkeys-lru"; Restart keeps them.
func StartWith(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "redis-server is not on PATH; install it (Debian: apt-get install -y redis-server) to run the Redis tests"
		if os.Getenv("RATEMONITOR_REQUIRE_REDIS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// A port found free can be taken by another test package's server before ours binds it:
	// ours then exits while the port answers for the other. So the server is ready only when
	// the one answering is ours (INFO's process_id), and a lost port is tried again.
	var last error
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		s := &Server{Addr: "127.0.0.1:" + port, t: t, port: port, args: args}
		if last = s.start(); last == nil {
			t.Cleanup(s.Stop)
			return s
		}
		s.Stop()
	}
	t.Fatal(last)
	return nil
}

func (s *Server) start() error {
	args := append([]string{"--port", s.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	want := "process_id:" + strconv.Itoa(s.cmd.Process.Pid) + "\r\n"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if info, err := c.Info(context.Background(), "server").Result(); err == nil {
			if strings.Contains(info, want) {
				return nil
			}
			return fmt.Errorf("redis-server on %s: another server answers there", s.Addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer within 10 s", s.Addr)
		}
	}
}

// Stop kills the server and waits for it to exit. It is safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// Client returns a client for the server set as the store needs (no retries, context
// deadlines honoured), closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// String returns the address.
func (s *Server) String() string { return fmt.Sprint(s.Addr) }

// Package redistest starts a real redis-server for tests, on a free loopback port, with no
// persistence.
//
// Importing it silences go-redis's logger (redis.SetLogger, a global of the test binary) for
// every test of the importing package: the tests stop, kill and pause servers on purpose, and
// go-redis would log every dial those refuse (pool.go's "connection refused", by the hundred),
// burying the text of a failure. What a test needs to know of an outage it asserts through
// errors and events, not through go-redis's log. The logger is set when the package is
// initialised, before any test or client runs, so that no go-redis goroutine reads it while it
// is written.
package redistest

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/internal/redisfleet"
	"github.com/redis/go-redis/v9"
)

func init() { redis.SetLogger(silent{}) }

// silent is the go-redis logger of every test binary that imports redistest: it drops every
// line.
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// Server is a redis-server process owned by one test (the one given to Start): its helpers
// fail that test, so call them from it, not from a subtest or TestMain. Make one with Start or
// StartWith; the zero Server is not usable. A Server is not safe for concurrent use.
type Server struct {
	Addr string
	t    testing.TB
	p    redisfleet.Proc
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
	redisfleet.NeedRedis(t)
	// A port found free can be taken by another test package's server before ours binds it:
	// ours then exits while the port answers for the other. So the server is ready only when
	// the one answering is ours (redisfleet.Proc.Start), and a lost port is tried again.
	var last error
	for range 5 {
		ports, err := redisfleet.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(ports[0])
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
	s.p = redisfleet.Proc{Addr: s.Addr}
	return s.p.Start(append([]string{"--port", s.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, s.args...)...)
}

// Stop kills the server and waits for it to exit. It is safe to call twice.
func (s *Server) Stop() { s.p.Kill() }

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// Client returns a client for the server set as the store needs (no retries, context
// deadlines honoured, one dial attempt), closed when the server's test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// String returns the address.
func (s *Server) String() string { return fmt.Sprint(s.Addr) }

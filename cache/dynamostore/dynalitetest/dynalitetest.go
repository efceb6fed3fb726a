// Package dynalitetest starts a real DynamoDB API for tests: dynalite (the npm package, an
// implementation of DynamoDB on LevelDB), in memory, on a free loopback port.
package dynalitetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/internal/dynalite"
)

// envRequire names the environment variable that, set to 1 (as in CI), turns a missing
// dynalite into a test failure instead of a skip.
const envRequire = "RATEMONITOR_REQUIRE_DYNAMODB"

// Server is a dynalite process owned by one test.
type Server struct {
	// Endpoint is the server's base URL, e.g. http://127.0.0.1:40123.
	Endpoint string
	t        testing.TB
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has exited
}

// Start runs dynalite in memory on a free loopback port, waits until it answers, and stops it
// when the test ends. It looks for dynalite's npm bin script at $RATEMONITOR_DYNALITE, then on
// PATH, then at /opt/dynalite/node_modules/.bin/dynalite (`npm install --prefix /opt/dynalite
// dynalite@4.0.0`), and runs it under node when node is on PATH. Without dynalite the test is
// skipped, or fails when RATEMONITOR_REQUIRE_DYNAMODB=1.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := dynalite.Find()
	if bin == "" {
		msg := fmt.Sprintf("dynalite not found ($%s, PATH, %s); install it with `%s` (Node.js ≥ 18) to run the DynamoDB tests",
			dynalite.EnvBinary, strings.Join(dynalite.KnownPaths, ", "), dynalite.Install)
		if os.Getenv(envRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// A port found free can be taken by another test package's server before ours binds it:
	// ours then exits (EADDRINUSE) while the port answers for the other. So a server is ready
	// only when it says itself that it listens, and a lost port is tried again with another.
	var last error
	for range 5 {
		s, err := start(t, bin)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		last = err
	}
	t.Fatal(last)
	return nil
}

// start runs dynalite on a port found free and waits until it says it listens there.
func start(t testing.TB, bin string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	s := &Server{Endpoint: "http://127.0.0.1:" + port, t: t, exited: make(chan struct{})}
	s.cmd = dynalite.Command(t, bin, port)
	out := &dynalite.SyncBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(out.String(), dynalite.Listening) {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("dynalite on %s exited while starting:\n%s", s.Endpoint, out)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("dynalite on %s did not say it listens within 15 s:\n%s", s.Endpoint, out)
		}
	}
}

// Stop kills the server and waits for it to exit. It is safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Client returns a DynamoDB client for the server: static dummy credentials, region
// us-east-1, BaseEndpoint set to the server, and the SDK's own retries off (attempts = 1) so
// that a test sees every error.
func (s *Server) Client() *dynamodb.Client {
	return dynalite.NewClient(s.Endpoint)
}

// CreateTable creates a table named name with the layout the DynamoDB store wants (partition
// key pk, a string) through create, failing the test on error. It returns name.
func (s *Server) CreateTable(create func(ctx context.Context, c *dynamodb.Client, table string) error, name string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := create(ctx, s.Client(), name); err != nil {
		s.t.Fatalf("create table %s: %v", name, err)
	}
	return name
}

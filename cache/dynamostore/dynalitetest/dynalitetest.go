// Package dynalitetest starts a real DynamoDB API for tests: dynalite (the npm package, an
// implementation of DynamoDB on LevelDB), in memory, on a free loopback port.
package dynalitetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// EnvBinary names the environment variable that may give dynalite's path: its npm bin script
// (node_modules/.bin/dynalite), which Command runs under node when node is on PATH, not a
// wrapper script.
const EnvBinary = "RATEMONITOR_DYNALITE"

// EnvRequire names the environment variable that, set to 1 (as in CI), turns a missing
// dynalite into a test failure instead of a skip.
const EnvRequire = "RATEMONITOR_REQUIRE_DYNAMODB"

// KnownPaths are where Find looks after EnvBinary and PATH: the install .ci/run makes.
var KnownPaths = []string{"/opt/dynalite/node_modules/.bin/dynalite"}

// Install is the command that installs dynalite where Find looks.
const Install = "npm install --prefix /opt/dynalite dynalite@4.0.0"

// Server is a dynalite process owned by one test.
type Server struct {
	// Endpoint is the server's base URL, e.g. http://127.0.0.1:40123.
	Endpoint string
	t        testing.TB
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has exited
}

// Find returns the dynalite executable: $RATEMONITOR_DYNALITE, else dynalite on PATH, else one
// of KnownPaths. It returns "" when there is none.
func Find() string {
	if p := os.Getenv(EnvBinary); p != "" {
		return p
	}
	if p, err := exec.LookPath("dynalite"); err == nil {
		return p
	}
	for _, p := range KnownPaths {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// Start runs dynalite in memory on a free loopback port, waits until it answers, and stops it
// when the test ends. Without dynalite the test is skipped, or fails when
// RATEMONITOR_REQUIRE_DYNAMODB=1.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Find()
	if bin == "" {
		msg := fmt.Sprintf("dynalite not found ($%s, PATH, %s); install it with `%s` (Node.js ≥ 18) to run the DynamoDB tests",
			EnvBinary, strings.Join(KnownPaths, ", "), Install)
		if os.Getenv(EnvRequire) == "1" {
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
	s.cmd = Command(t, bin, port)
	out := &SyncBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(out.String(), Listening) {
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

// Command returns the command that runs dynalite bin in memory on port. dynalite 4.0.0 throws
// from a request's error handler when a client aborts a request mid-body (ECONNRESET, what a
// context deadline does to a request in flight), and that kills the server: under node, a
// preloaded handler ignores that one error, so a test that cancels a request does not take
// the server down for the next one. Without node on PATH, bin runs as it is.
func Command(t testing.TB, bin, port string) *exec.Cmd {
	args := []string{"--host", "127.0.0.1", "--port", port, "--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"}
	var cmd *exec.Cmd
	if node, err := exec.LookPath("node"); err == nil {
		pre := filepath.Join(t.TempDir(), "ignore-aborted.js")
		if err := os.WriteFile(pre, []byte(ignoreAborted), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(node, append([]string{"-r", pre, bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Dir = filepath.Dir(bin)
	return cmd
}

// ignoreAborted keeps dynalite alive when a client aborts a request; any other uncaught error
// still ends it, as before.
const ignoreAborted = `process.on('uncaughtException', function (err) {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) return;
  console.error(err);
  process.exit(1);
});
`

// Listening is what dynalite prints once it listens on its port.
const Listening = "Dynalite listening at"

// SyncBuffer is a bytes.Buffer safe for a process's output copier and a reader at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
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
	return NewClient(s.Endpoint)
}

// NewClient returns a client for endpoint, set as Client sets it.
func NewClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider("dummy", "dummy", ""),
		BaseEndpoint:     aws.String(endpoint),
		RetryMaxAttempts: 1,
	})
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

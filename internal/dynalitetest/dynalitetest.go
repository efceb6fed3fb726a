// Package dynalitetest starts a real DynamoDB API for tests: dynalite (the npm package, an
// implementation of DynamoDB on LevelDB), in memory, on a free loopback port.
package dynalitetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// EnvBinary names the environment variable that may give the dynalite executable's path.
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	s := &Server{Endpoint: "http://127.0.0.1:" + port, t: t}
	s.cmd = exec.Command(bin, "--host", "127.0.0.1", "--port", port,
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	s.cmd.Dir = filepath.Dir(bin)
	out := &strings.Builder{}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(s.Stop)
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get(s.Endpoint)
		if err == nil {
			resp.Body.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("dynalite on %s did not answer within 15 s: %v\n%s", s.Endpoint, err, out)
		}
		time.Sleep(20 * time.Millisecond)
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

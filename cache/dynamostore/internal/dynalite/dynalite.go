// Package dynalite finds and runs dynalite (the npm package, DynamoDB on LevelDB) for the
// DynamoDB store's tests: package dynalitetest's Start, and the store's own fault tests that
// stop and restart it.
package dynalite

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// EnvBinary names the environment variable that may give dynalite's path: its npm bin script
// (node_modules/.bin/dynalite), which Command runs under node when node is on PATH, not a
// wrapper script.
const EnvBinary = "RATEMONITOR_DYNALITE"

// KnownPaths are where Find looks after EnvBinary and PATH: where Install puts it (what
// .ci/run does).
var KnownPaths = []string{"/opt/dynalite/node_modules/.bin/dynalite"}

// Install is the command that installs dynalite where Find looks.
const Install = "npm install --prefix /opt/dynalite dynalite@4.0.0"

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

// NewClient returns a DynamoDB client for endpoint: static dummy credentials, region us-east-1,
// and the SDK's own retries off (attempts = 1) so that a test sees every error.
func NewClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider("dummy", "dummy", ""),
		BaseEndpoint:     aws.String(endpoint),
		RetryMaxAttempts: 1,
	})
}

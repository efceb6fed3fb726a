package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// binary is the service built once for all tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ratelimitd")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "ratelimitd")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("building ratelimitd: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type service struct {
	url string
	db  string
}

var listening = regexp.MustCompile(`msg=listening url=(http://\S+)`)

// start runs the service with args on a free port and an audit file of the test's own, and
// stops it with SIGTERM when the test ends, checking that it exits cleanly.
func start(t *testing.T, args ...string) service {
	t.Helper()
	db := filepath.Join(t.TempDir(), "ratelimitd.db")
	cmd := exec.Command(binary, append([]string{"-addr", "127.0.0.1:0", "-db", db}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var url string
	var log strings.Builder
	for url == "" && lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		cmd.Wait()
		t.Fatalf("the service did not start:\n%s", log.String())
	}
	rest := make(chan string)
	go func() {
		b, _ := io.ReadAll(stderr)
		rest <- string(b)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		out := <-rest
		if err := cmd.Wait(); err != nil || !strings.Contains(out, "msg=stopped") {
			t.Errorf("service did not stop cleanly: %v\n%s", err, out)
		}
	})
	return service{url: url, db: db}
}

func (s service) get(t *testing.T, path, key string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+path, nil)
	if key != "" {
		req.Header.Set("X-Client-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func (s service) status(t *testing.T, query string) statusBody {
	t.Helper()
	resp, body := s.get(t, "/status"+query, "")
	var st statusBody
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET /status%s: %s %s", query, resp.Status, body)
	}
	return st
}

// audited returns the api_calls rows per key.
func (s service) audited(t *testing.T) map[string]int {
	t.Helper()
	db, err := sql.Open("sqlite", s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT key, count(*) FROM api_calls WHERE method = 'GET' AND path = '/ping' GROUP BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		rows.Scan(&k, &n)
		got[k] = n
	}
	return got
}

// awayFromMidnight waits, if need be, until the current 24 h fixed window has more than a
// minute left, so that a test's windows cannot roll over under it.
func awayFromMidnight() {
	now := time.Now().UTC()
	if left := now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now); left < time.Minute {
		time.Sleep(left + time.Second)
	}
}

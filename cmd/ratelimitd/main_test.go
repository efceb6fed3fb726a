package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/loadtest"
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

// TestService drives the service over real HTTP with each store: five calls of alice are
// admitted, the sixth gets a 429 with Retry-After and problem details, bob is not affected,
// /status counts without counting, and api_calls holds exactly the admitted calls.
func TestService(t *testing.T) {
	for _, c := range []struct {
		store, strategy string
		usedAfter       int // alice's count after six attempts
	}{
		{"memory", "fixedwindow", 6}, // the refused attempt is counted too
		{"sqlite", "fixedwindow", 6},
		{"sqlite", "tokenbucket", 5},
		{"redis", "rollingwindow", 5},
		{"redis", "fixedwindow", 6},
		{"redis", "tokenbucket", 5},
		{"dynamodb", "fixedwindow", 6},
		{"dynamodb", "tokenbucket", 5},
	} {
		t.Run(c.store+"/"+c.strategy, func(t *testing.T) {
			args := []string{"-store", c.store, "-strategy", c.strategy, "-limit", "5", "-window", "24h"}
			switch c.store {
			case "redis":
				args = append(args, "-redis", redistest.Start(t).String())
			case "dynamodb": // the service creates the table
				args = append(args, "-dynamodb-endpoint", dynalitetest.Start(t).Endpoint, "-dynamodb-table", "limits")
			}
			awayFromMidnight()
			s := start(t, args...)
			for i := range 5 {
				resp, body := s.get(t, "/ping", "alice")
				want := `"5-per-86400s";r=` + strconv.Itoa(4-i)
				if resp.StatusCode != http.StatusOK || string(body) != "{\"message\":\"pong\"}\n" ||
					!strings.HasPrefix(resp.Header.Get("RateLimit"), want) {
					t.Fatalf("call %d: %s %s RateLimit %q; want 200, pong, %s", i+1, resp.Status, body, resp.Header.Get("RateLimit"), want)
				}
				if got := resp.Header.Get("RateLimit-Policy"); got != `"5-per-86400s";q=5;w=86400` {
					t.Errorf("RateLimit-Policy %q", got)
				}
			}
			resp, body := s.get(t, "/ping", "alice")
			retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != http.StatusTooManyRequests || err != nil || retry < 1 {
				t.Fatalf("sixth call: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
			}
			// The wait the service gives is the one its strategy implies, to the second.
			now := time.Now()
			var want float64
			switch c.strategy {
			case "fixedwindow":
				want = now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now).Seconds()
			case "tokenbucket":
				want = 86400.0 / 5 // one token refills in a fifth of the window
			default:
				want = 86400 // the first of the five calls leaves the window
			}
			if math.Abs(float64(retry)-want) > 3 {
				t.Errorf("Retry-After %d, want about %.0f", retry, want)
			}
			var p map[string]any
			if err := json.Unmarshal(body, &p); err != nil || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("problem body %s (%v), Content-Type %q", body, err, resp.Header.Get("Content-Type"))
			}
			wantP := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": float64(429), "instance": "/ping",
				"detail": `Rate limit "5-per-86400s" (5 per 86400s) is used up; retry after ` + strconv.Itoa(retry) + " s."}
			for k, v := range wantP {
				if p[k] != v {
					t.Errorf("problem %s = %v, want %v", k, p[k], v)
				}
			}
			// The client side of the library reads the service's fields back.
			pol := headers.ParseIETF(resp.Header)
			if len(pol) != 1 || pol[0].Name != "5-per-86400s" || pol[0].Remaining != 0 || pol[0].Quota != 5 || pol[0].Window != 24*time.Hour ||
				pol[0].Reset < time.Second {
				t.Errorf("headers.ParseIETF read %+v", pol)
			}
			if resp, _ := s.get(t, "/ping", "bob"); resp.StatusCode != http.StatusOK {
				t.Errorf("bob: %s, want 200", resp.Status)
			}
			for range 2 { // /status does not count
				st := s.status(t, "?key=alice")
				if st.Key != "key:alice" || st.Strategy != c.strategy || len(st.Rules) != 1 || math.Abs(float64(st.RetryAfter-int64(retry))) > 2 ||
					st.Rules[0].Used != c.usedAfter || st.Rules[0].Remaining != 0 || st.Rules[0].Limit != 5 {
					t.Errorf("status of alice: %+v, want used %d", st, c.usedAfter)
				}
			}
			if st := s.status(t, ""); st.Key != "ip:127.0.0.1" || st.Rules[0].Used != 0 || st.RetryAfter != 0 {
				t.Errorf("own status: %+v, want ip:127.0.0.1 unused", st)
			}
			if resp, _ := s.get(t, "/ping", ""); resp.StatusCode != http.StatusOK {
				t.Errorf("no key header: %s", resp.Status)
			}
			want2 := map[string]int{"key:alice": 5, "key:bob": 1, "ip:127.0.0.1": 1}
			if got := s.audited(t); len(got) != 3 || got["key:alice"] != 5 || got["key:bob"] != 1 || got["ip:127.0.0.1"] != 1 {
				t.Errorf("api_calls = %v, want %v", got, want2)
			}
		})
	}
}

// TestBadFlags: settings that cannot work stop the service at once with a message that says
// which flag is wrong.
func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "nosuch"}, `-store "nosuch": want memory, sqlite, redis or dynamodb`},
		{[]string{"-store", "dynamodb"}, "-store dynamodb needs -dynamodb-endpoint"},
		{[]string{"-store", "dynamodb", "-dynamodb-endpoint", "http://127.0.0.1:1"}, "-dynamodb-endpoint http://127.0.0.1:1 -dynamodb-table ratemonitor:"},
		{[]string{"-strategy", "leaky"}, `-strategy "leaky": want fixedwindow, rollingwindow or tokenbucket`},
		{[]string{"-limit", "0"}, "-limit 0 -window 1m0s: invalid rule"},
		{[]string{"-window", "1500ms", "-strategy", "rollingwindow"}, "not a whole multiple of the granularity"},
		{[]string{"-store", "sqlite", "-window", "1500ms"}, "a fixed window here must be whole seconds"},
		{[]string{"-strategy", "tokenbucket", "-limit", "1000000000", "-window", "24h"}, "a token bucket needs limit × window ≤ 2^62 ns"},
		{[]string{"-store", "redis", "-redis", "127.0.0.1:1"}, "cannot reach Redis at 127.0.0.1:1"},
		{[]string{"-db", ""}, "-db is empty"},
		{[]string{"-key-header", ""}, "-key-header is empty"},
		{[]string{"-limit", "2000000000000000"}, "at most 15 digits"},
		{[]string{"-db", "/nonexistent/dir/x.db"}, "-db /nonexistent/dir/x.db:"},
		{[]string{"-trusted-proxies", "10.0.0.0/8,notanip"}, `-trusted-proxies: "notanip" is neither an address nor a CIDR range`},
		{[]string{"-granularity", "7s"}, "-granularity applies to -strategy rollingwindow only"},
		{[]string{"-window", "-1s"}, "window -1s must be positive"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		out, err := exec.Command(binary, append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "x.db")}, c.args...)...).CombinedOutput()
		if code := exitCode(err); code != 1 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: exit %d, output %q; want exit 1 and %q", c.args, code, out, c.want)
		}
	}
}

// TestHelp: -h prints the flags and exits 0.
func TestHelp(t *testing.T) {
	out, err := exec.Command(binary, "-h").CombinedOutput()
	if exitCode(err) != 0 || !strings.Contains(string(out), "-strategy string") {
		t.Errorf("-h: %v\n%s", err, out)
	}
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestLoad is the loopback load test, bounded in count and time: 4 000 requests over 20 keys
// with a limit of 100 each admit exactly 2 000, none over the limit, none failed.
func TestLoad(t *testing.T) {
	for _, store := range []string{"memory", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			// A token bucket refilling 100 over 24 h gains no token during the test, and has no
			// window edge to cross: each key's admissions are exactly 100.
			s := start(t, "-store", store, "-strategy", "tokenbucket", "-limit", "100", "-window", "24h")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := loadtest.Run(ctx, loadtest.Config{URL: s.url + "/ping", Requests: 4000, Concurrency: 16, Keys: 20, MaxDuration: 50 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res)
			if res.Sent != 4000 || res.Admitted != 2000 || res.Refused != 2000 || res.Failed != 0 || res.OverAdmitted(100) != 0 {
				t.Errorf("%v (first failure %q); want 4000 sent, 2000 admitted, 0 over the limit", res, res.FirstFailure)
			}
			if got := s.audited(t); len(got) != 20 || got["key:load-7"] != 100 {
				t.Errorf("api_calls per key = %v, want 100 for each of 20 keys", got)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

func TestMain(m *testing.M) {
	// The AWS SDK's HTTP client keeps idle keep-alive connections, whose goroutines are
	// net/http's, not ours.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// runCmd runs the command in-process.
func runCmd(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw bytes.Buffer
	code = run(ctx, args, &out, &errw)
	return code, out.String(), errw.String()
}

func rule(limit int, w time.Duration) strategy.Rule { return strategy.Rule{Limit: limit, Window: w} }

// must panics on a setup error (the test fails with it).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// sqliteWith returns a store URL for a new SQLite file in which key has n requests recorded
// under s.
func sqliteWith(t *testing.T, s *engine.Strategy, key string, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.db")
	st := must(sqlitestore.Open(context.Background(), path, sqlitestore.Options{}))
	defer st.Close()
	if err := st.Record(context.Background(), s, key, n); err != nil {
		t.Fatal(err)
	}
	return "sqlite://" + path
}

func TestStatusSQLite(t *testing.T) {
	s := must(rollingwindow.New(rule(60, time.Hour), rule(5000, 24*time.Hour)))
	url := sqliteWith(t, s, "key:alice", 3)
	want := fmt.Sprintf(`key "key:alice", rollingwindow, %s
RULE          USED  REMAINING  WAIT FOR 1
60/1h0m0s     3     57         0s
5000/24h0m0s  3     4997       0s
all rules: wait 0s for 1 more; not paused
`, url)
	for _, args := range [][]string{
		{"status", "--store", url, "--rule", "60/1h", "--rule", "5000/24h", "key:alice"},
		{"status", "--header-key", "alice", "--store", url, "--rule", "60/1h", "--rule", "5000/24h"},
		{"status", "key:alice", "--store", url, "--rule", "60/1h", "--rule", "5000/24h", "--strategy", "rollingwindow"}, // flags after KEY
	} {
		code, out, errs := runCmd(t, context.Background(), args...)
		if code != 0 || out != want || errs != "" {
			t.Errorf("%q: exit %d\n%s\nwant\n%s\nstderr: %s", args, code, out, want, errs)
		}
	}
	// A key with nothing recorded: said so, exit 3, no table of zeros.
	code, out, errs := runCmd(t, context.Background(), "status", "--store", url, "--rule", "60/1h", "key:bob")
	if want := fmt.Sprintf("ratemonitor: status: nothing recorded for key \"key:bob\" in %s under the rules 60/1h0m0s (rollingwindow): "+
		"no counter exists, or all its requests have expired; check the KEY, --rule and --strategy the key is counted under\n", url); code != 3 || out != "" || errs != want {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant   %q", code, out, errs, want)
	}
}

// TestStatusSQLiteFixedWindowFull fills a fixed window: used and remaining exact, the wait the
// rest of the window (the window is aligned to UTC, so it is checked against the clock).
func TestStatusSQLiteFixedWindowFull(t *testing.T) {
	s := must(fixedwindow.New(rule(10, time.Hour)))
	url := sqliteWith(t, s, "tenant-1", 12)
	before := time.Now()
	code, out, errs := runCmd(t, context.Background(), "status", "--json", "--strategy", "fixedwindow", "--store", url, "--rule", "10/1h", "tenant-1")
	after := time.Now()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	end := fixedwindow.WindowStart(before, time.Hour).Add(time.Hour)
	if len(rep.Rules) != 1 || rep.Rules[0].Used != 12 || rep.Rules[0].Remaining != 0 || rep.Rules[0].Limit != 10 || rep.Rules[0].WindowSeconds != 3600 {
		t.Fatalf("rules %+v", rep.Rules)
	}
	lo, hi := end.Sub(after), end.Sub(before)
	if w := time.Duration(rep.WaitNS); w < lo || w > hi || time.Duration(rep.Rules[0].WaitNS) < lo || time.Duration(rep.Rules[0].WaitNS) > hi || rep.PausedUntil != nil || rep.Strategy != "fixedwindow" || rep.Key != "tenant-1" {
		t.Fatalf("wait %v, want %v to %v: %+v", w, lo, hi, rep)
	}
}

// wildcards replaces the figures that depend on the clock by "*": waits of minutes or hours
// and instants. A wait read within a millisecond of the record is rounded up to a whole hour
// ("1h0m0s", as it is at once without -race), one read later is "59m59.998s": both are waits.
// Rule names ("60/1h0m0s") follow a "/", so they stay.
// The table's columns are as wide as those figures, so runs of spaces are made two.
var (
	wildcards = regexp.MustCompile(`(^|[ ])((\d+h)?\d+m\d+(\.\d+)?s|\d{4}-\d\d-\d\dT[0-9:.]+Z)`)
	spaces    = regexp.MustCompile(` {2,}`)
)

func TestStatusRedis(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client()
	st := must(redisstore.New(rc, redisstore.Options{Timeout: 5 * time.Second}))
	ctx := context.Background()
	day := strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}
	s := must(rollingwindow.New(rule(60, time.Hour), day))
	before := time.Now()
	if err := st.Record(ctx, s, "tenant-1", 60); err != nil {
		t.Fatal(err)
	}
	// An upstream 429 with Retry-After: 1800 and X-DayLimit-Remaining: 4000.
	if err := st.Sync(ctx, s, "tenant-1", engine.Update{Pause: 30 * time.Minute,
		Reports: []engine.Report{{Rule: 1, Remaining: 4000, Used: 1000}}}); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + srv.Addr
	args := []string{"status", "--store", url, "--rule", "60/1h", "--rule", "5000/24h,granularity=10s", "tenant-1"}
	code, out, errs := runCmd(t, ctx, args...)
	want := fmt.Sprintf(`key "tenant-1", rollingwindow, %s
RULE  USED  REMAINING  WAIT FOR 1  UPSTREAM SAID
60/1h0m0s  60  0  *  -
5000/24h0m0s (granularity 10s)  1000  4000  *  4000 remaining at *
all rules: wait * for 1 more; paused for *, until *
`, url)
	if got := spaces.ReplaceAllString(wildcards.ReplaceAllString(out, "${1}*"), "  "); code != 0 || got != want {
		t.Errorf("exit %d, stderr %s\n%s\nwant\n%s", code, errs, got, want)
	}
	t.Log("\n" + out)

	code, out, errs = runCmd(t, ctx, append([]string{"status", "--json"}, args[1:]...)...)
	after := time.Now()
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errs)
	}
	within := func(what string, d, lo, hi time.Duration) {
		t.Helper()
		if d < lo || d > hi {
			t.Errorf("%s %v, want %v to %v", what, d, lo, hi)
		}
	}
	// The hour rule: 60 recorded at before…after, free an hour later; the pause lasts 30 min.
	within("hour rule's wait", time.Duration(rep.Rules[0].WaitNS), time.Hour-after.Sub(before)-time.Second, time.Hour)
	within("day rule's wait (the pause)", time.Duration(rep.Rules[1].WaitNS), 30*time.Minute-after.Sub(before)-time.Second, 30*time.Minute)
	within("wait", time.Duration(rep.WaitNS), time.Hour-after.Sub(before)-time.Second, time.Hour)
	within("pause", time.Duration(rep.PauseNS), 30*time.Minute-after.Sub(before)-time.Second, 30*time.Minute)
	if r := rep.Rules; r[0].Used != 60 || r[0].Remaining != 0 || r[1].Used != 1000 || r[1].Remaining != 4000 || r[1].Reported == nil || *r[1].Reported != 4000 || r[0].Reported != nil {
		t.Errorf("rules %+v", r)
	}

	// --prefix names the store's key prefix: another prefix holds nothing for the key, and
	// status says which prefix it looked under.
	code, out, errs = runCmd(t, ctx, "status", "--store", url, "--prefix", "other", "--rule", "60/1h", "tenant-1")
	if want := "ratemonitor: status: nothing recorded for key \"tenant-1\" in " + url + " under prefix \"other\" under the rules 60/1h0m0s (rollingwindow): " +
		"no counter exists, or all its requests have expired; check the KEY, --prefix (" + examplePrefixes + "), --rule and --strategy the key is counted under\n"; code != 3 || out != "" || errs != want {
		t.Errorf("--prefix other: exit %d\nstdout %q\nstderr %q\nwant   %q", code, out, errs, want)
	}
	// A day at 1 s granularity (asked for: the default for a day is 24 min) is 86 400 buckets:
	// more than the Redis store holds.
	code, _, errs = runCmd(t, ctx, "status", "--store", url, "--rule", "5000/24h,granularity=1s", "tenant-1")
	if code != 2 || !strings.HasPrefix(errs, "ratemonitor: --store "+url+" cannot hold these rules under rollingwindow: ") {
		t.Errorf("exit %d: %s", code, errs)
	}
}

func TestStatusDynamoDB(t *testing.T) {
	srv := dynalitetest.Start(t)
	table := srv.CreateTable(dynamostore.CreateTable, "limits")
	st := must(dynamostore.New(srv.Client(), dynamostore.Options{Table: table}))
	defer st.Close()
	s := must(tokenbucket.New(rule(10, time.Hour)))
	for range 4 {
		if res, err := st.Reserve(context.Background(), s, "ip:203.0.113.7", 1); err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
	}
	url := "dynamodb+" + srv.Endpoint + "?table=" + table
	code, out, errs := runCmd(t, context.Background(), "status", "--strategy", "tokenbucket", "--store", url, "--rule", "10/1h", "ip:203.0.113.7")
	// Tokens come back one per 6 minutes: used is 4, rounded up, for the next 6.
	want := fmt.Sprintf(`key "ip:203.0.113.7", tokenbucket, %s
RULE       USED  REMAINING  WAIT FOR 1
10/1h0m0s  4     6          0s
all rules: wait 0s for 1 more; not paused
`, url)
	if code != 0 || out != want {
		t.Errorf("exit %d, stderr %s\n%s\nwant\n%s", code, errs, out, want)
	}
	code, _, errs = runCmd(t, context.Background(), "status", "--store", "dynamodb+"+srv.Endpoint+"?table=nosuch", "--rule", "10/1h", "k")
	if code != 1 || !strings.Contains(errs, "nosuch") {
		t.Errorf("missing table: exit %d: %s", code, errs)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l := must(net.Listen("tcp", "127.0.0.1:0"))
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestErrors(t *testing.T) {
	sq := sqliteWith(t, must(rollingwindow.New(rule(60, time.Minute))), "k", 1)
	dead := closedPort(t)
	for _, c := range []struct {
		args []string
		code int
		want string // stderr, or its start when it ends in "…"
	}{
		{nil, 2, "…ratemonitor: want a command: status or watch\n"},
		{[]string{"stats"}, 2, "ratemonitor: unknown command \"stats\": want status or watch (ratemonitor -h lists the flags)\n"},
		{[]string{"status", "--store", sq, "--rule", "60per1m", "k"}, 2, "ratemonitor: --rule: invalid rule \"60per1m\": want LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N], e.g. 60/1m or 5000/24h,granularity=10s\n"},
		{[]string{"status", "--store", sq, "--rule", "x/1m", "k"}, 2, "ratemonitor: --rule: invalid rule \"x/1m\": limit \"x\" is not a whole number; want LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N], e.g. 60/1m or 5000/24h,granularity=10s\n"},
		{[]string{"status", "--store", sq, "--rule", "60/1m,burst=3", "k"}, 2, "ratemonitor: --rule: invalid rule \"60/1m,burst=3\": unknown option \"burst=3\": want granularity=D, margin=D or headroom=N\n"},
		{[]string{"status", "--store", sq, "--rule", "0/1m", "k"}, 2, "ratemonitor: --rule: invalid rule 0/1m0s: limit is 0, it must be at least 1\n"},
		{[]string{"status", "--store", sq, "--rule", "60/1m"}, 2, "ratemonitor: status: missing KEY: the store key, e.g. tenant-1, key:alice or ip:203.0.113.7 (or --header-key V)\n"},
		{[]string{"status", "--store", sq, "--rule", "60/1m", "a", "b"}, 2, "ratemonitor: status: want one KEY, got 2: [\"a\" \"b\"]\n"},
		{[]string{"status", "--store", sq, "k"}, 2, "ratemonitor: status: at least one --rule is required, e.g. --rule 60/1m\n"},
		{[]string{"status", "--rule", "60/1m", "k"}, 2, "ratemonitor: status: --store is required, e.g. --store redis://127.0.0.1:6379\n"},
		{[]string{"status", "--store", sq, "--rule", "60/1m", "--bogus", "k"}, 2, "ratemonitor: status: flag provided but not defined: -bogus (ratemonitor -h lists the flags)\n"},
		{[]string{"status", "--store", sq, "--rule", "60/1m", "--strategy", "leakybucket", "k"}, 2, "ratemonitor: --strategy \"leakybucket\": want rollingwindow, fixedwindow or tokenbucket\n"},
		{[]string{"status", "--store", sq, "--rule", "60/1m", "--strategy", "fixedwindow", "--granularity", "10s", "k"}, 2, "ratemonitor: --granularity applies to the rolling window only (the fixedwindow ignores it)\n"},
		{[]string{"status", "--store", "memcached://127.0.0.1:11211", "--rule", "60/1m", "k"}, 2, "ratemonitor: --store memcached://127.0.0.1:11211: unknown scheme \"memcached\": want redis, sqlite, dynamodb+http or dynamodb+https\n"},
		{[]string{"status", "--store", "127.0.0.1:6379", "--rule", "60/1m", "k"}, 2, "ratemonitor: --store \"127.0.0.1:6379\": want redis://host:port, sqlite:///path.db or dynamodb+http(s)://endpoint?table=T\n"},
		{[]string{"status", "--store", "dynamodb+http://127.0.0.1:8000", "--rule", "60/1m", "k"}, 2, "ratemonitor: --store dynamodb+http://127.0.0.1:8000: name the table, e.g. ?table=ratemonitor\n"},
		{[]string{"status", "--store", "redis://" + dead, "--rule", "60/1m", "k"}, 1, "ratemonitor: --store redis://" + dead + ": Redis does not answer: dial tcp " + dead + ": connect: connection refused\n"},
		{[]string{"status", "--store", "dynamodb+http://" + dead + "?table=t", "--rule", "60/1m", "k"}, 1, "ratemonitor: --store dynamodb+http://" + dead + "?table=t: …"},
		{[]string{"status", "--store", "sqlite:///nonexistent/limits.db", "--rule", "60/1m", "k"}, 1, "ratemonitor: --store sqlite:///nonexistent/limits.db: stat /nonexistent/limits.db: no such file or directory\n"},
		// The SQLite store writes a fixed window's start to the second.
		{[]string{"status", "--store", sq, "--strategy", "fixedwindow", "--rule", "60/1m,margin=500ms", "k"}, 2, "ratemonitor: --store " + sq + " cannot hold these rules under fixedwindow: ratemonitor: sqlite store: rule 60/1m0s (margin 500ms): a fixed window here must be whole seconds, got 1m0.5s\n"},
		{[]string{"status", "--store", sq, "--rule", "60/1m", "--header-key", "alice", "k"}, 2, "ratemonitor: status: give KEY or --header-key, not both\n"},
		{[]string{"watch", "--store", sq, "--rule", "60/1m", "--interval", "0s", "k"}, 2, "ratemonitor: --interval 0s: want a positive duration\n"},
	} {
		code, out, errs := runCmd(t, context.Background(), c.args...)
		ok := errs == c.want
		if p, cut := strings.CutSuffix(c.want, "…"); cut {
			ok = strings.HasPrefix(errs, p)
		} else if p, cut := strings.CutPrefix(c.want, "…"); cut {
			ok = strings.HasSuffix(errs, p)
		}
		if code != c.code || !ok || out != "" {
			t.Errorf("%q: exit %d (want %d), stdout %q\nstderr %q\nwant   %q", c.args, code, c.code, out, errs, c.want)
		}
	}
}

// frameWriter cancels its context once it has been written n frames (one Write each).
type frameWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	n      int
	cancel context.CancelFunc
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if w.writes == w.n {
		w.cancel()
	}
	return w.buf.Write(p)
}

func TestWatch(t *testing.T) {
	s := must(rollingwindow.New(rule(60, time.Hour)))
	url := sqliteWith(t, s, "tenant-1", 7)
	for _, jsonOut := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		w := &frameWriter{n: 4, cancel: cancel}
		args := []string{"watch", "--interval", "50ms", "--store", url, "--rule", "60/1h", "tenant-1"}
		if jsonOut {
			args = append(args, "--json")
		}
		var errw bytes.Buffer
		start := time.Now()
		code := run(ctx, args, w, &errw)
		cancel()
		out := w.buf.String()
		if code != 0 || errw.Len() != 0 {
			t.Fatalf("exit %d: %s", code, errw.String())
		}
		if took := time.Since(start); took < 150*time.Millisecond {
			t.Errorf("4 frames 50 ms apart in %v", took)
		}
		if jsonOut {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 4 {
				t.Fatalf("%d lines:\n%s", len(lines), out)
			}
			for _, l := range lines {
				var rep report
				if err := json.Unmarshal([]byte(l), &rep); err != nil || rep.Rules[0].Used != 7 {
					t.Errorf("%v: %s", err, l)
				}
			}
			continue
		}
		frames := regexp.MustCompile(`every 50ms, \d\d:\d\d:\d\d\.\d{3} \(Ctrl-C to stop\)\n`).Split(out, -1)
		if len(frames) != 5 || frames[0] != "" {
			t.Fatalf("want 4 frames:\n%s", out)
		}
		table := fmt.Sprintf("key \"tenant-1\", rollingwindow, %s\nRULE       USED  REMAINING  WAIT FOR 1\n60/1h0m0s  7     53         0s\nall rules: wait 0s for 1 more; not paused\n", url)
		for i, f := range frames[1:] {
			if i < 3 {
				table += "\n" // a blank line between frames
			}
			if f != table {
				t.Errorf("frame %d:\n%q\nwant\n%q", i, f, table)
			}
			table = strings.TrimSuffix(table, "\n\n") + "\n"
		}
	}
}

// TestBinary builds the command and runs it as a process: status, and watch stopped by SIGINT.
func TestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ratemonitor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := must(fixedwindow.New(rule(100, 24*time.Hour)))
	url := sqliteWith(t, s, "key:alice", 5)
	out, err := exec.Command(bin, "status", "--strategy", "fixedwindow", "--store", url, "--rule", "100/24h", "--header-key", "alice").Output()
	want := fmt.Sprintf("key \"key:alice\", fixedwindow, %s\nRULE         USED  REMAINING  WAIT FOR 1\n100/24h0m0s  5     95         0s\nall rules: wait 0s for 1 more; not paused\n", url)
	if err != nil || string(out) != want {
		t.Errorf("%v\n%s\nwant\n%s", err, out, want)
	}

	cmd := exec.Command(bin, "status", "--store", url, "--rule", "60per1m", "k")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 || stderr.String() != "ratemonitor: --rule: invalid rule \"60per1m\": want LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N], e.g. 60/1m or 5000/24h,granularity=10s\n" {
		t.Errorf("malformed rule: %v, %q", err, stderr.String())
	}

	cmd = exec.Command(bin, "watch", "--interval", "50ms", "--strategy", "fixedwindow", "--store", url, "--rule", "100/24h", "key:alice")
	var stdout syncBuffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(stdout.String(), "Ctrl-C") < 3; {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no 3 frames in 10 s:\n%s", stdout.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	if err != nil || !strings.Contains(stdout.String(), "100/24h0m0s  5     95         0s\n") {
		t.Errorf("watch after SIGINT: %v\n%s", err, stdout.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

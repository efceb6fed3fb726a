package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/rollingwindow"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l := must(net.Listen("tcp", "127.0.0.1:0"))
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestUsageAndStoreErrorsExitWithMessage: each wrong command line exits 2, and each store that
// cannot be reached or read exits 1, with a message on stderr that says what is wrong and what
// is wanted, and nothing on stdout.
func TestUsageAndStoreErrorsExitWithMessage(t *testing.T) {
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
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
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
		})
	}
}

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadFlagsExitNamingFlag: settings that cannot work stop the service at once with a message
// that says which flag is wrong.
func TestBadFlagsExitNamingFlag(t *testing.T) {
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
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, err := exec.Command(binary, append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "x.db")}, c.args...)...).CombinedOutput()
			if code := exitCode(err); code != 1 || !strings.Contains(string(out), c.want) {
				t.Errorf("%v: exit %d, output %q; want exit 1 and %q", c.args, code, out, c.want)
			}
		})
	}
}

// TestHelpListsFlags: -h prints the flags and exits 0.
func TestHelpListsFlags(t *testing.T) {
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

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

const nothingTail = "no counter exists, or all its requests have expired; check the "

// TestStatusNothingRecordedExits3Redis: against a real Redis, status finds the key only under the
// prefix it was written under (xero_example's); elsewhere, or under other rules, it says what it
// looked for (prefix, key, rules, strategy) on stderr, prints nothing on stdout and exits 3, --json
// too. A key holding only a pause is not "nothing".
func TestStatusNothingRecordedExits3Redis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	st := must(redisstore.New(srv.Client(), redisstore.Options{Prefix: "xero_example", Timeout: 5 * time.Second}))
	s := must(rollingwindow.New(rule(60, time.Minute)))
	if err := st.Record(ctx, s, "tenant-1", 4); err != nil {
		t.Fatal(err)
	}
	if err := st.Sync(ctx, s, "paused-only", engine.Update{Pause: time.Hour}); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + srv.Addr
	hint := "KEY, --prefix (" + examplePrefixes + "), --rule and --strategy the key is counted under\n"

	code, out, errs := runCmd(t, ctx, "status", "--store", url, "--prefix", "xero_example", "--rule", "60/1m", "tenant-1")
	if code != 0 || !strings.Contains(out, "60/1m0s  4     56 ") || errs != "" {
		t.Errorf("under its prefix: exit %d\n%s%s", code, out, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rule", "60/1m", "tenant-1"}, `key "tenant-1" in ` + url + ` under prefix "ratemonitor" under the rules 60/1m0s (rollingwindow)`},
		{[]string{"--json", "--rule", "60/1m", "tenant-1"}, `key "tenant-1" in ` + url + ` under prefix "ratemonitor" under the rules 60/1m0s (rollingwindow)`},
		{[]string{"--prefix", "xero_example", "--rule", "60/1m", "tenant-2"}, `key "tenant-2" in ` + url + ` under prefix "xero_example" under the rules 60/1m0s (rollingwindow)`},
		{[]string{"--prefix", "xero_example", "--rule", "60/1h", "--rule", "5000/24h,granularity=10s", "tenant-1"},
			`key "tenant-1" in ` + url + ` under prefix "xero_example" under the rules 60/1h0m0s, 5000/24h0m0s (granularity 10s) (rollingwindow)`},
	} {
		code, out, errs := runCmd(t, ctx, append([]string{"status", "--store", url}, c.args...)...)
		if want := "ratemonitor: status: nothing recorded for " + c.want + ": " + nothingTail + hint; code != exitNothing || out != "" || errs != want {
			t.Errorf("%q: exit %d\nstdout %q\nstderr %q\nwant   %q", c.args, code, out, errs, want)
		}
	}
	code, out, errs = runCmd(t, ctx, "status", "--store", url, "--prefix", "xero_example", "--rule", "60/1m", "paused-only")
	if code != 0 || !strings.Contains(out, "; paused for ") || errs != "" {
		t.Errorf("a key with only a pause: exit %d\n%s%s", code, out, errs)
	}
}

// TestStatusNothingRecordedExits3SQLite: the SQLite store has no prefix; the message names the
// file, key and rules, and a rule's margin from --margin finds the counter written with that
// margin.
func TestStatusNothingRecordedExits3SQLite(t *testing.T) {
	withMargin := strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}
	url := sqliteWith(t, must(rollingwindow.New(withMargin)), "k", 5)
	ctx := context.Background()
	for _, args := range [][]string{
		{"--rule", "60/1m,margin=1s", "k"},
		{"--margin", "1s", "--rule", "60/1m", "k"},
		{"--margin", "2s", "--rule", "60/1m,margin=1s", "k"}, // the rule's own margin wins
	} {
		code, out, errs := runCmd(t, ctx, append([]string{"status", "--store", url}, args...)...)
		if code != 0 || !strings.Contains(out, "60/1m0s (margin 1s)  5     55 ") || errs != "" {
			t.Errorf("%q: exit %d\n%s%s", args, code, out, errs)
		}
	}
	for _, c := range []struct {
		args  []string
		rules string
	}{
		{[]string{"--rule", "60/1m", "k"}, "60/1m0s"},
		{[]string{"--rule", "60/1m,margin=1s", "other"}, "60/1m0s (margin 1s)"},
	} {
		code, out, errs := runCmd(t, ctx, append([]string{"status", "--store", url}, c.args...)...)
		key := c.args[len(c.args)-1]
		want := "ratemonitor: status: nothing recorded for key \"" + key + "\" in " + url + " under the rules " + c.rules +
			" (rollingwindow): " + nothingTail + "KEY, --rule and --strategy the key is counted under\n"
		if code != exitNothing || out != "" || errs != want {
			t.Errorf("%q: exit %d\nstdout %q\nstderr %q\nwant   %q", c.args, code, out, errs, want)
		}
	}
}

// TestHelpNamesPrefixes: -h names the prefixes, and they are those the programs use:
// xero_example sets Prefix "xero_example"; cmd/ratelimitd and examples/redisworker set none
// (redisstore.DefaultPrefix, "ratemonitor").
func TestHelpNamesPrefixes(t *testing.T) {
	code, _, errs := runCmd(t, context.Background(), "-h")
	if want := `prefixes (--prefix, Redis): xero_example writes under "xero_example"; cmd/ratelimitd and examples/redisworker under the default "ratemonitor"`; code != 0 || !strings.Contains(errs, want) {
		t.Errorf("-h: exit %d, want it to say %q:\n%s", code, want, errs)
	}
	if redisstore.DefaultPrefix != "ratemonitor" {
		t.Errorf("redisstore.DefaultPrefix = %q", redisstore.DefaultPrefix)
	}
	// The programs' Redis stores: xero_example's prefix is its constant redisPrefix, the others
	// set none (the default).
	for file, want := range map[string]struct {
		prefixes int
		holds    string
	}{
		"../../xero_example/run.go":          {1, "Prefix: redisPrefix"},
		"../../xero_example/status.go":       {0, `const redisPrefix = "xero_example"`},
		"../../cmd/ratelimitd/server.go":     {0, ""},
		"../../examples/redisworker/main.go": {0, ""},
	} {
		b, err := os.ReadFile(filepath.FromSlash(file))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "Prefix:"); n != want.prefixes || !strings.Contains(string(b), want.holds) {
			t.Errorf("%s sets a redisstore Prefix %d times (want %d) and holds %q: %v; -h and the README name the wrong prefix",
				file, n, want.prefixes, want.holds, strings.Contains(string(b), want.holds))
		}
	}
}

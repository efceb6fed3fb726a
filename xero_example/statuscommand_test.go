package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// statusLine matches a printed inspection command and captures its store, prefix, rules and
// key.
var statusLine = regexp.MustCompile(`(?m)^  go run \./cmd/ratemonitor status --store redis://(\S+) --prefix (\S+) --rule (\S+) --rule (\S+) (\S+)$`)

// TestPrintedStatusCommandFindsEveryTenant runs the example on Redis and reads the store as each
// command it prints at its end says (cmd/ratemonitor parses --rule with strategy.ParseRule and
// peeks under those rules and the prefix): the command must find each tenant's requests, all
// of them under the day rule.
func TestPrintedStatusCommandFindsEveryTenant(t *testing.T) {
	srv := redistest.Start(t)
	cfg, err := parseFlags([]string{"-scale", "60", "-progress", "0", "-redis", srv.Addr, "-tenants", "2", "-requests", "20", "-margin", "6s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	cmds := statusLine.FindAllStringSubmatch(out.String(), -1)
	if len(cmds) != 2 || sum.sent != 40 {
		t.Fatalf("%d status commands printed, %d requests sent; want 2 and 40:\n%s", len(cmds), sum.sent, out.String())
	}
	for i, c := range cmds {
		addr, prefix, key := c[1], c[2], c[5]
		if addr != srv.Addr || key != sum.tenants[i].id {
			t.Errorf("command %d names %s and key %s, want the run's Redis %s and tenant %s", i, addr, key, srv.Addr, sum.tenants[i].id)
		}
		var rules []strategy.Rule
		for _, flag := range c[3:5] {
			r, err := strategy.ParseRule(flag)
			if err != nil {
				t.Fatalf("--rule %s: %v", flag, err)
			}
			rules = append(rules, r)
		}
		s, err := rollingwindow.New(rules...)
		if err != nil {
			t.Fatal(err)
		}
		st, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := st.Peek(context.Background(), s, key, 0)
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := snap.Usage[1].Used; got != 20 {
			t.Errorf("%s: the printed command finds %d requests under the day rule %s, want the 20 sent", key, got, rules[1])
		}
	}
}

// TestDocsGiveTheStatusCommandTheExamplePrints: the docs' command for the example's default run
// (scale 10, margin 1 s, local Redis) is the one the example prints, so that following them
// finds the tenants instead of exiting 3 (nothing recorded).
func TestDocsGiveTheStatusCommandTheExamplePrints(t *testing.T) {
	cfg, err := parseFlags([]string{"-redis", defaultRedisAddr}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := statusCommand(cfg, newTiming(cfg.scale, cfg.margin), "tenant-1")
	for _, doc := range []string{"../docs/operations.md", "../docs/xero-example.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		// A command written over several lines (a backslash, a newline and an indent) is one.
		text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(b), "")
		if !strings.Contains(text, want) {
			t.Errorf("%s does not give the command the example prints for tenant-1 of its default run:\n%s", doc, want)
		}
	}
	var out bytes.Buffer
	printStatusCommands(&out, config{scale: 10}, newTiming(10, cfg.margin), []string{"tenant-1"})
	if !strings.Contains(out.String(), want) {
		t.Errorf("a run on the memory store prints\n%s\nwant it to give the command of a run with -redis %s:\n%s", out.String(), defaultRedisAddr, want)
	}
}

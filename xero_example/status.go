package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// redisPrefix is the key prefix the example's Redis store writes under.
const redisPrefix = "xero_example"

// defaultRedisAddr is the address the inspection command names when the run kept its counts in
// memory: that of a local redis-server, for a run with -redis.
const defaultRedisAddr = "127.0.0.1:6379"

// ruleFlag writes r as cmd/ratemonitor's --rule takes it (strategy.ParseRule's syntax). The
// counters are addressed by window, margin and granularity: all three must be the run's own.
func ruleFlag(r strategy.Rule) string {
	s := fmt.Sprintf("%d/%v", r.Limit, r.Window)
	if r.Granularity != 0 {
		s += fmt.Sprintf(",granularity=%v", r.Granularity)
	}
	if r.Margin != 0 {
		s += fmt.Sprintf(",margin=%v", r.Margin)
	}
	if r.Headroom != 0 {
		s += fmt.Sprintf(",headroom=%d", r.Headroom)
	}
	return s
}

// statusCommand is the cmd/ratemonitor command, run from the repository root, that shows what
// the run's shared store holds for tenant: its address (and prefix), and the run's rules,
// scaled. For a run on the memory store it names a local Redis, for a run with -redis.
func statusCommand(cfg config, tm timing, tenant string) string {
	store := "redis://" + defaultRedisAddr + " --prefix " + redisPrefix
	switch {
	case cfg.redisAddr != "":
		store = "redis://" + cfg.redisAddr + " --prefix " + redisPrefix
	case cfg.dynamoEndpoint != "":
		u, err := url.Parse(cfg.dynamoEndpoint)
		if err == nil {
			store = "'dynamodb+" + u.Scheme + "://" + u.Host + u.Path + "?table=" + url.QueryEscape(cfg.dynamoTable) + "'"
		}
	}
	var rules []string
	for _, r := range tm.rules() {
		rules = append(rules, "--rule "+ruleFlag(r))
	}
	return "go run ./cmd/ratemonitor status --store " + store + " " + strings.Join(rules, " ") + " " + tenant
}

// printStatusCommands ends a run with the commands that show its tenants' counts from outside
// the program (docs/operations.md), while the day rule keeps them (tm.day).
func printStatusCommands(out io.Writer, cfg config, tm timing, ids []string) {
	if cfg.redisAddr == "" && cfg.dynamoEndpoint == "" {
		fmt.Fprintf(out, "\nthe counts were in this process's memory and ended with it; run with -redis %s to keep them in Redis, then see a tenant's with:\n", defaultRedisAddr)
	} else {
		fmt.Fprintf(out, "\nsee what the store holds for each tenant (for the next %v, the run's day) with:\n", tm.day.Round(1e9))
	}
	for _, id := range ids {
		fmt.Fprintf(out, "  %s\n", statusCommand(cfg, tm, id))
	}
}

// Command ratelimitd is a small HTTP service that shows the ratemonitor middleware at work:
//
//	GET /ping            limited per X-Client-Key (falling back to the peer address); answers
//	                     {"message":"pong"} and writes a row to the api_calls audit table
//	GET /status?key=K    the usage of the key a request with X-Client-Key: K is counted
//	                     under, without counting anything; without key=, the caller's own key
//	GET /metrics         Prometheus metrics (package metrics): admitted, refused, store errors, …
//
// A refused /ping gets 429 with Retry-After and an application/problem+json body (RFC 9457),
// and every /ping carries the IETF RateLimit-Policy and RateLimit fields.
//
// Usage:
//
//	go run ./cmd/ratelimitd -limit 5 -window 1m -strategy fixedwindow -store sqlite -db ratelimitd.db
//
// Flags choose the rule (-limit per -window), the strategy (fixedwindow, rollingwindow,
// tokenbucket: capacity -limit refilled over -window), and the store (memory, sqlite, redis,
// dynamodb).
// The audit table lives in the SQLite file -db whatever the store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); errors.Is(err, flag.ErrHelp) {
		return
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimitd:", err)
		os.Exit(1)
	}
}

// run parses args, serves until ctx is done, then shuts down gracefully. Logs go to logw.
func run(ctx context.Context, args []string, logw io.Writer) error {
	cfg, err := parseFlags(args, logw)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	srv, err := newServer(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	return srv.Serve(ctx)
}

// parseFlags reads the command line into a config, checking every value.
func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("ratelimitd", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free one; the log says which)")
	fs.IntVar(&c.limit, "limit", 60, "requests allowed per window and key (the token bucket's capacity)")
	fs.DurationVar(&c.window, "window", defaultWindow, "window length, e.g. 1m or 24h (the token bucket's time to refill from empty)")
	fs.DurationVar(&c.granularity, "granularity", 0, "rolling window only: bucket width; 0 picks the library's default (strategy.DefaultGranularityFor): the largest whole second count that divides the window and is at most max(1s, window/60), e.g. 1s up to 1m, 10s for 10m, 1m for 1h, 24m for 24h; or window/1000 when that default would cut the window into more than 1000 buckets (a long window with no divisor near window/60)")
	fs.StringVar(&c.strategy, "strategy", "fixedwindow", "fixedwindow, rollingwindow or tokenbucket")
	fs.StringVar(&c.store, "store", "memory", "where counts live: memory, sqlite (the -db file), redis (-redis) or dynamodb (-dynamodb-endpoint, -dynamodb-table)")
	fs.StringVar(&c.db, "db", "ratelimitd.db", "SQLite file for the api_calls audit table, and for the counts with -store sqlite")
	fs.StringVar(&c.redis, "redis", "127.0.0.1:6379", "Redis address for -store redis")
	fs.StringVar(&c.dynamoEndpoint, "dynamodb-endpoint", "", "DynamoDB API URL for -store dynamodb, e.g. http://127.0.0.1:8000 for dynalite (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, region from AWS_REGION)")
	fs.StringVar(&c.dynamoTable, "dynamodb-table", "ratemonitor", "DynamoDB table for -store dynamodb (partition key pk, a string); created when missing")
	fs.StringVar(&c.keyHeader, "key-header", "X-Client-Key", "header that names the client; requests without it are counted by peer address")
	fs.IntVar(&c.metricsKeys, "metrics-keys", 0, "label /metrics per client key for at most this many distinct keys (later keys count as key=\"other\"); 0: no key label")
	fs.StringVar(&c.trusted, "trusted-proxies", "", "comma-separated addresses or CIDR ranges of proxies whose X-Forwarded-For is believed")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q; every setting is a flag (see -h)", fs.Args())
	}
	return c, c.check()
}

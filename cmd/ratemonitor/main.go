// Command ratemonitor inspects the rate-limit state a store holds for one key, without
// counting anything.
//
//	ratemonitor status --store URL [--strategy S] --rule LIMIT/WINDOW... [flags] KEY
//	ratemonitor watch  --store URL [--strategy S] --rule LIMIT/WINDOW... [--interval 1s] [flags] KEY
//
// status prints, per rule, the requests that count now, the remaining allocation and the wait
// for one more request, then the wait under all rules and the key's pause (an upstream's 429
// seen through WithSync). watch prints the same every --interval until interrupted.
//
// Stores (--store):
//
//	redis://[user:password@]host:port[/db]           the Redis store (--prefix: its key prefix)
//	sqlite:///path/to/limits.db                      an existing SQLite file (sqlite://rel/path.db is relative)
//	dynamodb+http://127.0.0.1:8000?table=ratemonitor  DynamoDB's API at that endpoint (dynalite, DynamoDB Local)
//	dynamodb+https://dynamodb.eu-west-1.amazonaws.com?table=ratemonitor
//
// KEY is the raw store key: what a Transport's KeyFunc returns (a Xero tenant id, a host), or
// the middleware's "key:V" (the key header's value V; --header-key V says the same) or
// "ip:ADDRESS". A credential header's values are hashed by the middleware (key:hmac:…):
// --header-key V --key-header NAME computes that key as Limiter.HeaderKey does, with the
// secret of WithKeySecret read from the environment variable --key-secret-env names; only the
// hashed key is printed. The rules and the strategy must be those the key is counted under: counters
// are addressed by their window (with margin) and, for the rolling window, granularity.
//
// The Redis key prefixes (--prefix) of this repository's programs: xero_example writes under
// "xero_example"; cmd/ratelimitd and examples/redisworker under the default "ratemonitor".
//
// Exit status: 0 on success (and when watch is interrupted), 2 for a usage error (flags,
// rules, a strategy the store cannot hold), 1 when the store fails, 3 when status finds
// nothing recorded for KEY under the rules (no counter, or all its requests expired; it says
// which prefix, key and rules it looked under).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command ratelimitload sends a bounded load to a rate-limited endpoint (by default the demo
// service's /ping) and prints requests per second, latency percentiles, and how many requests
// were admitted beyond the limit per key (over-admissions, which must be 0).
//
//	go run ./cmd/ratelimitload -url http://127.0.0.1:8080/ping -requests 50000 -concurrency 32 -keys 100 -limit 300
//
// Give -limit the service's per-key limit, and run within one window of a freshly started
// service (a long -window, such as 1h, and an empty -db file), so that each key's admissions are
// known exactly: min(limit, requests per key). It exits 1 when any request failed, or when the
// admissions differ from that: over the limit is the limiter's fault; under it usually means
// the service had already counted these keys (restart it, or remove its -db file).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/loadtest"
)

func main() {
	var c loadtest.Config
	var limit int
	flag.StringVar(&c.URL, "url", "http://127.0.0.1:8080/ping", "endpoint to load")
	flag.IntVar(&c.Requests, "requests", 20000, "requests to send in all")
	flag.IntVar(&c.Concurrency, "concurrency", 32, "requests in flight at once")
	flag.IntVar(&c.Keys, "keys", 100, "distinct X-Client-Key values, used round-robin")
	flag.DurationVar(&c.MaxDuration, "max-duration", time.Minute, "stop sending after this long")
	flag.IntVar(&limit, "limit", 0, "the service's per-key limit, to count over-admissions (0: do not check)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := loadtest.Run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimitload:", err)
		os.Exit(1)
	}
	fmt.Println(res)
	bad := res.Failed > 0
	if res.FirstFailure != "" {
		fmt.Println("first failure:", res.FirstFailure)
	}
	if limit > 0 {
		perKey := (c.Requests + c.Keys - 1) / c.Keys
		want := 0
		for k := range c.Keys {
			n := c.Requests / c.Keys
			if k < c.Requests%c.Keys {
				n++
			}
			want += min(n, limit)
		}
		over := res.OverAdmitted(limit)
		fmt.Printf("over-admissions: %d (limit %d per key, up to %d requests per key; %d admissions expected, %d seen)\n",
			over, limit, perKey, want, res.Admitted)
		if res.Admitted != want {
			fmt.Println("admissions differ from the expected count: a service that has already counted these keys in this window admits fewer; restart it with an empty -db file")
		}
		bad = bad || over > 0 || res.Admitted != want
	}
	if bad {
		os.Exit(1)
	}
}

// Command redisworker is one of several processes that pace requests for the same tenants
// through their own ratemonitor.Transport, sharing one allocation per tenant in Redis. The
// multi-process test starts four of them against one strict upstream.
//
//	go run ./examples/redisworker -redis 127.0.0.1:6379 -upstream http://127.0.0.1:8080 -tenants a,b
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	upstream := flag.String("upstream", "", "upstream base URL")
	tenants := flag.String("tenants", "tenant-a,tenant-b", "comma-separated tenant ids")
	requests := flag.Int("requests", 60, "requests per tenant from this process")
	goroutines := flag.Int("goroutines", 8, "goroutines per tenant")
	limit := flag.Int("limit", 60, "requests per window per tenant")
	window := flag.Duration("window", 2*time.Second, "window")
	margin := flag.Duration("margin", 20*time.Millisecond, "safety margin added to the window")
	granularity := flag.Duration("granularity", 10*time.Millisecond, "bucket width")
	listen := flag.String("serve", "", "instead of sending, serve a strict upstream on this address until stdin closes")
	flag.Parse()
	if *listen != "" {
		if err := serve(*listen, *limit, *window, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "redisworker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*addr, *upstream, strings.Split(*tenants, ","), *requests, *goroutines,
		strategy.Rule{Limit: *limit, Window: *window, Margin: *margin, Granularity: *granularity}); err != nil {
		fmt.Fprintln(os.Stderr, "redisworker:", err)
		os.Exit(1)
	}
}

func run(addr, upstream string, tenants []string, requests, goroutines int, rule strategy.Rule) error {
	if upstream == "" {
		return fmt.Errorf("-upstream is required")
	}
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = goroutines * len(tenants)
	defer base.CloseIdleConnections()
	tr, err := ratemonitor.New(base, ratemonitor.WithRules(rule), ratemonitor.WithStore(store), ratemonitor.WithPacing(),
		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)))
	if err != nil {
		return err
	}
	httpClient := &http.Client{Transport: tr, Timeout: time.Minute}
	var sent, tooMany, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		var left atomic.Int64
		left.Store(int64(requests))
		for range goroutines {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, upstream, nil)
					req.Header.Set("Xero-Tenant-Id", tenant)
					resp, err := httpClient.Do(req)
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					sent.Add(1)
					if resp.StatusCode == http.StatusTooManyRequests {
						tooMany.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	fmt.Printf("sent %d, 429s %d, failed %d\n", sent.Load(), tooMany.Load(), failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("%d requests failed; first: %v", failed.Load(), firstErr.Load())
	}
	return nil
}

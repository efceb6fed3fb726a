// Package loadtest drives a rate-limited HTTP endpoint with concurrent requests spread over
// keys, and measures throughput, latency and admissions: what cmd/ratelimitload prints and the
// demo service's tests assert.
package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config says what to send. Requests go round-robin over Keys keys, named "load-0" …, in the
// header KeyHeader.
type Config struct {
	URL         string
	Requests    int           // total requests; must be at least 1
	Concurrency int           // requests in flight at once; 1 when zero
	Keys        int           // distinct keys; 1 when zero
	KeyHeader   string        // "X-Client-Key" when empty
	MaxDuration time.Duration // stop sending after this long; no bound when zero
}

// Result is what a run measured.
type Result struct {
	Sent, Admitted, Refused, Failed int // 200s, 429s, and anything else (errors included)
	Elapsed                         time.Duration
	P50, P99, Max                   time.Duration
	// AdmittedPerKey counts the 200s of each key.
	AdmittedPerKey map[string]int
	// FirstFailure describes the first failed request, if any.
	FirstFailure string
}

// RPS is requests completed per second.
func (r Result) RPS() float64 { return float64(r.Sent) / r.Elapsed.Seconds() }

// OverAdmitted returns how many requests were admitted beyond limit per key: 0 when the limiter
// held (within one window).
func (r Result) OverAdmitted(limit int) int {
	n := 0
	for _, a := range r.AdmittedPerKey {
		n += max(0, a-limit)
	}
	return n
}

// String is a one-line summary.
func (r Result) String() string {
	return fmt.Sprintf("%d requests in %v: %.0f req/s, p50 %v, p99 %v, max %v; %d admitted, %d refused, %d failed",
		r.Sent, r.Elapsed.Round(time.Millisecond), r.RPS(), r.P50, r.P99, r.Max, r.Admitted, r.Refused, r.Failed)
}

// Run sends the requests and waits for every answer. It stops early when ctx is done or
// MaxDuration has passed; Result then counts what was sent.
func Run(ctx context.Context, c Config) (Result, error) {
	if c.URL == "" || c.Requests < 1 {
		return Result{}, errors.New("loadtest: want a URL and at least one request")
	}
	c.Concurrency, c.Keys = max(c.Concurrency, 1), max(c.Keys, 1)
	if c.KeyHeader == "" {
		c.KeyHeader = "X-Client-Key"
	}
	if c.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.MaxDuration)
		defer cancel()
	}
	tr := &http.Transport{MaxIdleConnsPerHost: c.Concurrency, MaxConnsPerHost: c.Concurrency}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	var next atomic.Int64
	lat := make([][]time.Duration, c.Concurrency)
	admitted := make([][]int, c.Concurrency) // per worker, per key
	var mu sync.Mutex
	var res Result
	start := time.Now()
	var wg sync.WaitGroup
	for w := range c.Concurrency {
		admitted[w] = make([]int, c.Keys)
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= c.Requests {
					return
				}
				k := i % c.Keys
				t0 := time.Now()
				status, err := send(ctx, client, c, k)
				if ctx.Err() != nil {
					return // cut off by the bound: not counted
				}
				lat[w] = append(lat[w], time.Since(t0))
				mu.Lock()
				switch {
				case err != nil || status != http.StatusOK && status != http.StatusTooManyRequests:
					res.Failed++
					if res.FirstFailure == "" {
						res.FirstFailure = fmt.Sprintf("status %d, error %v", status, err)
					}
				case status == http.StatusOK:
					res.Admitted++
					admitted[w][k]++
				default:
					res.Refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	all := slices.Concat(lat...)
	res.Sent = len(all)
	if res.Sent == 0 {
		return res, fmt.Errorf("loadtest: no request completed: %w", ctx.Err())
	}
	slices.Sort(all)
	res.P50, res.P99, res.Max = all[(len(all)-1)*50/100], all[(len(all)-1)*99/100], all[len(all)-1]
	res.AdmittedPerKey = map[string]int{}
	for _, per := range admitted {
		for k, n := range per {
			if n > 0 {
				res.AdmittedPerKey[keyName(k)] += n
			}
		}
	}
	return res, nil
}

func keyName(k int) string { return "load-" + strconv.Itoa(k) }

func send(ctx context.Context, client *http.Client, c Config, k int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(c.KeyHeader, keyName(k))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/retry"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// tenantRun is one tenant's progress, guarded by the run's mutex.
type tenantRun struct {
	id        string
	sent      int
	tooMany   int
	problems  map[string]int // 429s by X-Rate-Limit-Problem: minute, concurrent, ...
	failed    int
	waitUntil time.Time // zero when not waiting
	done      time.Time
	firstFail string
	calls     callLog // with -plot against a real API: when each call was sent, by its answer
}

// summary is what a run measured.
type summary struct {
	sent, tooMany, failed int
	problems              map[string]int // 429s by X-Rate-Limit-Problem ("minute", "concurrent", ...)
	firstFailure          string         // what the first failed request met
	elapsed               time.Duration
	minimum               time.Duration  // least time the minute limit allows for the requests
	peaks                 map[string]int // local upstream only: most calls per minute window
	upstreamRefused       int            // local upstream only: 429s it sent, retried ones included
	tenants               []*tenantRun
}

// timing turns Xero's real windows into the compressed ones of a run.
type timing struct {
	scale  float64
	g      time.Duration // bucket granularity: 100 ms of Xero time
	minute time.Duration
	day    time.Duration
	margin time.Duration
}

// minRealMargin is the least margin in real time, whatever the scale: the time from recording
// a request to the upstream counting it (a new connection, a busy scheduler) does not shrink
// when the run's clock is compressed.
const minRealMargin = 10 * time.Millisecond

func newTiming(scale float64, margin time.Duration) timing {
	// Whole microseconds, so that the Redis store (µs resolution) takes the same rules.
	g := time.Duration(float64(100*time.Millisecond) / scale).Truncate(time.Microsecond)
	// Windows are whole multiples of g, as rules require; the margin is rounded up to one.
	real := max(time.Duration(float64(margin)/scale), minRealMargin)
	steps := time.Duration(math.Ceil(float64(real) / float64(g)))
	return timing{scale: scale, g: g, minute: 600 * g, day: 864_000 * g, margin: steps * g}
}

// rules are Xero's per-tenant minute and day limits, with the margin held on each window
// because the upstream counts a request when it arrives, a little after we record it. The day
// is counted in 10 s buckets (Xero time): 8 640 of them at most, which the Redis store accepts,
// and a day's slot freed at most 10 s late.
func (tm timing) rules() []strategy.Rule {
	dayG := 100 * tm.g
	dayMargin := (tm.margin + dayG - 1) / dayG * dayG
	return []strategy.Rule{
		{Limit: xeroMinuteLimit, Window: tm.minute, Granularity: tm.g, Margin: tm.margin},
		{Limit: xeroDayLimit, Window: tm.day, Granularity: dayG, Margin: dayMargin},
	}
}

// xero converts a real duration of the run into Xero time.
func (tm timing) xero(d time.Duration) time.Duration {
	return time.Duration(float64(d) * tm.scale).Round(time.Millisecond)
}

func run(ctx context.Context, cfg config, out io.Writer) (summary, error) {
	tm := newTiming(cfg.scale, cfg.margin)
	base, ids := cfg.baseURL, cfg.tenantIDs
	var up *upstream
	if base == "" {
		up = newUpstream(cfg.scale, cfg.fixed)
		up.minute, up.day = tm.minute, tm.day
		up.latency = time.Duration(float64(cfg.latency) / cfg.scale)
		if cfg.plot != "" {
			up.keepHistory()
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return summary{}, fmt.Errorf("starting the local upstream: %w", err)
		}
		srv := &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		base = "http://" + ln.Addr().String()
		ids = nil
		for i := 1; i <= cfg.tenants; i++ {
			ids = append(ids, "tenant-"+strconv.Itoa(i))
		}
		kind := "rolling"
		if cfg.fixed {
			kind = "fixed"
		}
		fmt.Fprintf(out, "local Xero upstream on %s: 60 per %v per tenant (%s window), 5000 per %v, 10000 per %v per app\n",
			base, tm.minute.Round(time.Millisecond), kind, tm.day.Round(time.Millisecond), tm.minute.Round(time.Millisecond))
		if cfg.foreign > 0 {
			for _, id := range ids {
				up.preload(id, cfg.foreign, time.Now())
			}
			fmt.Fprintf(out, "another app has just made %d calls for each tenant; this program cannot see them\n", cfg.foreign)
		}
	}
	rules := tm.rules()
	fmt.Fprintf(out, "time scale %g×: Xero's minute is %v here; margin %v on the minute, %v on the day (a whole number of its %v buckets)\n",
		cfg.scale, tm.minute.Round(time.Millisecond), rules[0].Margin, rules[1].Margin, rules[1].Granularity)

	baseTransport := http.DefaultTransport.(*http.Transport).Clone()
	// One kept-alive connection per request in flight: opening connections mid-run adds
	// latency between recording a request and the upstream counting it.
	baseTransport.MaxIdleConnsPerHost = 64
	defer baseTransport.CloseIdleConnections()
	opts := []ratemonitor.Option{
		ratemonitor.WithRules(tm.rules()...),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
	}
	if cfg.inFlight > 0 {
		// Xero's 5 calls in progress per tenant: a slot from the send until the body is read.
		opts = append(opts, ratemonitor.WithInFlight(cfg.inFlight))
	}
	inflight := "no in-flight limit"
	if cfg.inFlight > 0 {
		inflight = fmt.Sprintf("at most %d in flight per tenant", cfg.inFlight)
	}
	fmt.Fprintf(out, "%d goroutines per tenant, %s\n", cfg.concurrency, inflight)
	if cfg.redisAddr != "" {
		rc := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
		defer rc.Close()
		if err := rc.Ping(ctx).Err(); err != nil {
			return summary{}, fmt.Errorf("-redis %s: %w", cfg.redisAddr, err)
		}
		// A 1 s timeout rather than the default 100 ms: a paced Transport takes a timed-out
		// call for an outage and paces locally for a window (degraded mode), which a busy
		// machine's slow reply should not cost.
		store, err := redisstore.New(rc, redisstore.Options{Prefix: redisPrefix, Timeout: time.Second})
		if err != nil {
			return summary{}, err
		}
		opts = append(opts, ratemonitor.WithStore(store))
		fmt.Fprintf(out, "counts kept in Redis at %s: copies of this program share each tenant's allocation, and reserve each burst there\n", cfg.redisAddr)
		if cfg.baseURL == "" {
			fmt.Fprintf(out, "(each copy starts its own local upstream: the 429s, peaks and rates below are this copy's alone; the monitor's counts are shared)\n")
		}
	}
	if cfg.dynamoEndpoint != "" {
		if cfg.redisAddr != "" {
			return summary{}, errors.New("-redis and -dynamodb-endpoint: give one store")
		}
		if openDynamo == nil {
			return summary{}, errNoDynamo
		}
		store, err := openDynamo(ctx, cfg)
		if err != nil {
			return summary{}, err
		}
		defer store.Close()
		opts = append(opts, ratemonitor.WithStore(store))
		fmt.Fprintf(out, "counts kept in DynamoDB at %s, table %s: copies of this program share each tenant's allocation, and reserve each burst there\n",
			cfg.dynamoEndpoint, cfg.dynamoTable)
	}
	if cfg.sync {
		opts = append(opts,
			ratemonitor.WithSync(ratemonitor.SyncConfig{Readers: []headers.Reader{headers.XeroReader(tm.minute, tm.day)}}),
			ratemonitor.WithAppRules(appKey, strategy.Rule{Limit: xeroAppMinuteLimit, Window: tm.minute, Granularity: tm.g, Margin: tm.margin}),
			ratemonitor.WithPacing())
		fmt.Fprintf(out, "sync on: Xero's X-*Limit-Remaining raise the monitor's counts, a 429 pauses its tenant (or the app) until Retry-After, "+
			"and failed calls are retried through go-retryablehttp, every attempt paced\n")
	}
	tr, err := ratemonitor.New(baseTransport, opts...)
	if err != nil {
		return summary{}, err
	}
	defer tr.Close()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if cfg.sync {
		rc := retry.NewClient(tr)
		rc.HTTPClient.Timeout = 30 * time.Second
		client = rc.StandardClient()
	}

	var mu sync.Mutex
	runs := make([]*tenantRun, len(ids))
	for i, id := range ids {
		runs[i] = &tenantRun{id: id, calls: callLog{tenant: id}, problems: map[string]int{}}
	}
	start := time.Now()
	stopProgress := progress(ctx, cfg, tr, out, &mu, runs, start)

	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for i, r := range runs {
		wg.Go(func() { errs[i] = paceTenant(ctx, cfg, tr, client, base, &mu, r) })
	}
	wg.Wait()
	stopProgress()

	sum := summary{elapsed: time.Since(start), tenants: runs, problems: map[string]int{}}
	for _, r := range runs {
		sum.sent += r.sent
		sum.tooMany += r.tooMany
		for p, n := range r.problems {
			sum.problems[p] += n
		}
		sum.failed += r.failed
		if sum.firstFailure == "" && r.firstFail != "" {
			sum.firstFailure = r.id + ": " + r.firstFail
		}
	}
	// The other app's calls take the first window's slots as if they were ours.
	sum.minimum = time.Duration((cfg.requests+cfg.foreign-1)/xeroMinuteLimit) * tm.minute
	if up != nil {
		_, sum.upstreamRefused, sum.peaks = up.stats()
	}
	if err := ctx.Err(); err != nil {
		fmt.Fprintf(out, "\ninterrupted after %v: %d requests sent, %d × 429\n", sum.elapsed.Round(time.Millisecond), sum.sent, sum.tooMany)
		return sum, errors.Join(err, plotRun(cfg, tm, up, runs, start, start.Add(sum.elapsed), out))
	}
	printSummary(ctx, out, cfg, tm, tr, sum)
	printStatusCommands(out, cfg, tm, ids)
	return sum, errors.Join(append(errs, plotRun(cfg, tm, up, runs, start, start.Add(sum.elapsed), out))...)
}

// plotRun writes the -plot chart, when asked for: from the local upstream's record of the
// calls it counted and refused, or from the instants the client sent them (a real API).
func plotRun(cfg config, tm timing, up *upstream, runs []*tenantRun, start, end time.Time, out io.Writer) error {
	if cfg.plot == "" {
		return nil
	}
	logs := make([]callLog, len(runs))
	if up != nil {
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.id
		}
		logs = up.calls(ids)
	} else {
		for i, r := range runs { // the senders are done: no lock needed
			logs[i] = r.calls
			// Concurrent senders note their calls out of order.
			slices.SortFunc(logs[i].accepted, time.Time.Compare)
			slices.SortFunc(logs[i].refused, time.Time.Compare)
		}
	}
	series := chartData(logs, start, end, tm.minute, tm.scale)
	info := chartInfo{scale: tm.scale, requests: cfg.requests, upstream: up != nil, end: tm.scale * end.Sub(start).Seconds()}
	if err := writeChart(cfg.plot, series, info); err != nil {
		return err
	}
	fmt.Fprintf(out, "  chart           %s\n", cfg.plot)
	return nil
}

// paceTenant sends the tenant's requests in bursts. On its own it asks the monitor before each
// burst how long until the burst fits and waits that long: the pattern of the original PHP
// README. With -redis, other copies of the program take slots between that check and the sends,
// so it reserves each burst instead (one atomic step in Redis) and sends it on the reservation.
func paceTenant(ctx context.Context, cfg config, tr *ratemonitor.Transport, client *http.Client, base string, mu *sync.Mutex, r *tenantRun) error {
	for left := cfg.requests; left > 0; {
		burst := min(cfg.burst, left)
		d, err := tr.WaitTime(ctx, r.id, burst)
		if err != nil {
			return err
		}
		mu.Lock()
		r.waitUntil = time.Now().Add(d)
		mu.Unlock()
		sendCtx := ctx
		if cfg.redisAddr != "" || cfg.dynamoEndpoint != "" {
			res, err := tr.Reserve(ctx, r.id, burst)
			if err != nil {
				return err
			}
			sendCtx = res.Context(ctx)
		} else if d > 0 {
			if err := tr.Wait(ctx, r.id, burst); err != nil {
				return err
			}
		}
		mu.Lock()
		r.waitUntil = time.Time{}
		mu.Unlock()
		// The burst goes out on up to -concurrency goroutines at once.
		var todo sync.WaitGroup
		next := make(chan struct{}, burst)
		for range burst {
			next <- struct{}{}
		}
		close(next)
		for range max(1, min(cfg.concurrency, burst)) { // a config without it sends on one
			todo.Go(func() {
				for range next {
					if ctx.Err() != nil {
						return
					}
					sendOne(sendCtx, cfg, client, base, mu, r)
				}
			})
		}
		todo.Wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		left -= burst
	}
	mu.Lock()
	r.done = time.Now()
	mu.Unlock()
	return nil
}

// sendOne sends one request of r's tenant and notes its outcome.
func sendOne(sendCtx context.Context, cfg config, client *http.Client, base string, mu *sync.Mutex, r *tenantRun) {
	at := time.Now()
	status, problem, err := send(sendCtx, cfg, client, base, r.id)
	mu.Lock()
	r.sent++
	if cfg.plot != "" && err == nil {
		if status == http.StatusTooManyRequests {
			r.calls.refused = append(r.calls.refused, at)
		} else {
			r.calls.accepted = append(r.calls.accepted, at)
		}
	}
	switch {
	case err != nil:
		r.failed++
		if r.firstFail == "" {
			r.firstFail = err.Error()
		}
	case status == http.StatusTooManyRequests:
		r.tooMany++
		r.problems[strings.ToLower(problem)]++
	case status >= 300:
		r.failed++
		if r.firstFail == "" {
			r.firstFail = "HTTP " + strconv.Itoa(status) + " " + http.StatusText(status)
		}
	}
	mu.Unlock()
}

// send sends one request and returns its status and, for a 429, Xero's X-Rate-Limit-Problem.
func send(ctx context.Context, cfg config, client *http.Client, base, tenant string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+cfg.path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Xero-Tenant-Id", tenant)
	req.Header.Set("Accept", "application/json")
	if cfg.token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Rate-Limit-Problem"), nil
}

// progress prints one line per interval with each tenant's state; the returned func stops it
// and waits for the printer to finish.
func progress(ctx context.Context, cfg config, tr *ratemonitor.Transport, out io.Writer, mu *sync.Mutex, runs []*tenantRun, start time.Time) func() {
	if cfg.progress <= 0 {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(cfg.progress)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
			now := time.Now()
			var b strings.Builder
			fmt.Fprintf(&b, "[%6.1fs]", now.Sub(start).Seconds())
			paused := map[string]time.Duration{}
			if cfg.sync {
				for _, r := range runs {
					if st, err := tr.Status(ctx, r.id); err == nil {
						if p := pausedUntil(st); !p.IsZero() {
							paused[r.id] = time.Until(p)
						}
					}
				}
			}
			mu.Lock()
			for _, r := range runs {
				state := "sending"
				switch {
				case !r.done.IsZero():
					state = "done"
				case paused[r.id] > 0:
					state = "paused by the upstream " + paused[r.id].Round(10*time.Millisecond).String()
				case !r.waitUntil.IsZero() && r.waitUntil.After(now):
					state = "waiting " + r.waitUntil.Sub(now).Round(10*time.Millisecond).String()
				case !r.waitUntil.IsZero():
					state = "waiting for a slot"
				}
				fmt.Fprintf(&b, "  %s sent %d/%d, %s", r.id, r.sent, cfg.requests, state)
				if r.tooMany > 0 {
					fmt.Fprintf(&b, " 429×%d", r.tooMany)
				}
			}
			mu.Unlock()
			fmt.Fprintln(out, b.String())
		}
	}()
	return func() { close(stop); <-done }
}

func printSummary(ctx context.Context, out io.Writer, cfg config, tm timing, tr *ratemonitor.Transport, s summary) {
	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  requests sent   %d (%d tenants × %d, bursts of %d)\n", s.sent, len(s.tenants), cfg.requests, min(cfg.burst, cfg.requests))
	fmt.Fprintf(out, "  429s received   %d\n", s.tooMany)
	if s.tooMany > 0 {
		kinds := make([]string, 0, len(s.problems))
		for p, n := range s.problems {
			kinds = append(kinds, fmt.Sprintf("%s %d", p, n))
		}
		slices.Sort(kinds)
		fmt.Fprintf(out, "  429s by problem %s\n", strings.Join(kinds, ", "))
	}
	if cfg.sync && s.peaks != nil {
		fmt.Fprintf(out, "  429s sent       %d by the upstream, retried ones included\n", s.upstreamRefused)
	}
	fmt.Fprintf(out, "  other failures  %d\n", s.failed)
	if s.firstFailure != "" {
		fmt.Fprintf(out, "  first failure   %s\n", s.firstFailure)
	}
	fmt.Fprintf(out, "  elapsed         %v (%v in Xero time)\n", s.elapsed.Round(time.Millisecond), tm.xero(s.elapsed))
	if s.minimum > 0 && s.sent == len(s.tenants)*cfg.requests {
		what := fmt.Sprintf("%d requests", cfg.requests)
		if cfg.foreign > 0 {
			what += fmt.Sprintf(" after the other app's %d", cfg.foreign)
		}
		fmt.Fprintf(out, "  minimum         %v: %s at 60 per window cannot finish sooner\n", s.minimum.Round(time.Millisecond), what)
		if s.tooMany == 0 && s.failed == 0 {
			fmt.Fprintf(out, "  achieved rate   %.1f%% of the limit's throughput (minimum ÷ elapsed)\n",
				100*s.minimum.Seconds()/s.elapsed.Seconds())
		} else {
			fmt.Fprintf(out, "  achieved rate   not measured: requests that failed or met a 429 were sent but not served\n")
		}
	}
	for _, r := range s.tenants {
		line := fmt.Sprintf("  %-10s sent %d, 429s %d", r.id, r.sent, r.tooMany)
		if u, err := tr.AllocationUsed(ctx, r.id); err == nil {
			line += fmt.Sprintf(", monitor now: %d/%d this minute, %d/%d today", u[0].Used, u[0].Rule.Limit, u[1].Used, u[1].Rule.Limit)
		}
		if p, ok := s.peaks[r.id]; ok {
			line += fmt.Sprintf(", upstream peak %d/%d in any minute", p, xeroMinuteLimit)
		}
		fmt.Fprintln(out, line)
		if cfg.sync {
			printReported(ctx, out, tr, r.id)
		}
	}
	if cfg.sync {
		printReported(ctx, out, tr, appKey)
	}
}

// printReported sets what the upstream's headers last said next to what the monitor counts.
func printReported(ctx context.Context, out io.Writer, tr *ratemonitor.Transport, key string) {
	st, err := tr.Status(ctx, key)
	if key == appKey && err == nil && len(st.Meters) > 0 {
		st = st.Meters[0]
	}
	if err != nil {
		fmt.Fprintf(out, "      %s: %v\n", key, err)
		return
	}
	for _, u := range st.Rules {
		said := "nothing"
		if !u.ReportedAt.IsZero() {
			said = fmt.Sprintf("%d remaining", u.Reported)
		}
		fmt.Fprintf(out, "      %-10s %-12s monitor %d used, %d remaining; the upstream last said %s\n",
			key, u.Rule.String(), u.Used, u.Remaining, said)
	}
	if !st.PausedUntil.IsZero() {
		fmt.Fprintf(out, "      %-10s paused for %v more\n", key, time.Until(st.PausedUntil).Round(time.Millisecond))
	}
}

// pausedUntil is when the pause on a tenant, or on the whole app, ends; zero when none.
func pausedUntil(st ratemonitor.Status) time.Time {
	p := st.PausedUntil
	for _, m := range st.Meters {
		if m.PausedUntil.After(p) {
			p = m.PausedUntil
		}
	}
	return p
}

// appKey is the key the app-wide limit is counted under with -sync.
const appKey = "xero-app"

// openDynamo opens the DynamoDB store for -dynamodb-endpoint, creating its table when it does
// not exist. It is nil unless the program is built with -tags dynamodb (dynamodb.go): the AWS
// SDK is a large compile, and the default run does not need it.
var openDynamo func(ctx context.Context, cfg config) (cache.Store, error)

// errNoDynamo is what -dynamodb-endpoint gives in a build without the DynamoDB store.
var errNoDynamo = errors.New("-dynamodb-endpoint: this build has no DynamoDB store (it would compile the AWS SDK into every run); " +
	"build with the tag: go run -tags dynamodb ./xero_example -dynamodb-endpoint URL")

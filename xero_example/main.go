// Command xero_example paces a Xero-like workload with ratemonitor.
//
// By default it starts a local upstream on 127.0.0.1 that enforces Xero's limits strictly
// (60 calls per rolling minute and 5000 per day per tenant, 10 000 per minute per app, 5 in
// flight), in time compressed by -scale, and sends batches larger than the minute limit for
// several tenants through an http.Client whose Transport is a ratemonitor.Transport keyed by
// the Xero-Tenant-Id header. Before each burst it asks WaitTime and waits with Wait, as a
// caller pacing itself would. It prints progress and a summary, and exits 1 if the upstream
// answered 429 even once.
//
//	go run ./xero_example                  # 3 tenants × 150 requests, 10× faster than Xero
//	go run ./xero_example -scale 1         # Xero's real rates (about two minutes)
//	go run ./xero_example -base-url https://api.xero.com -token "$TOKEN" -tenant-ids ID1,ID2 -scale 1
//	go run ./xero_example -redis 127.0.0.1:6379 -base-url … # several copies share one allocation
//	go run ./xero_example -foreign 30 -sync # another app's calls: learn of them from Xero's headers
//	go run ./xero_example -plot run.svg    # and draw the run: per tenant, rate and minute usage against the limit
//	go run ./xero_example -in-flight 0     # no in-flight limit: 10 goroutines per tenant meet Xero's "concurrent" 429
//
// Each tenant's requests are sent by -concurrency goroutines (default 10), and the Transport
// lets at most -in-flight of them be in progress per tenant at once (default 5, Xero's limit;
// ratemonitor.WithInFlight): so the run meets neither of Xero's per-tenant limits. The DynamoDB
// store holds no in-flight leases: with -dynamodb-endpoint there is no in-flight limit and
// -concurrency defaults to 5. The DynamoDB store is compiled in only with -tags dynamodb (the AWS
// SDK is a long compile the default run does not need):
//
//	go run -tags dynamodb ./xero_example -dynamodb-endpoint http://127.0.0.1:8000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"
)

// config is everything a run needs; flags fill it.
type config struct {
	scale     float64       // time compression: 10 turns 60 per minute into 60 per 6 s
	tenants   int           // tenants to simulate against the local upstream
	requests  int           // requests per tenant
	burst     int           // requests sent back to back after each wait
	margin    time.Duration // safety margin added to each window, in Xero time
	fixed     bool          // local upstream enforces the minute as a fixed window
	progress  time.Duration // how often to print progress (0: never)
	baseURL   string        // real API instead of the local upstream
	path      string        // path requested
	token     string        // bearer token for the real API
	tenantIDs []string      // real tenant ids
	redisAddr string        // share counts through Redis instead of process memory
	// share counts through DynamoDB (an endpoint URL and a table) instead
	dynamoEndpoint, dynamoTable string
	sync                        bool          // learn from the upstream's headers and retry through go-retryablehttp
	foreign                     int           // calls per tenant another app made just before the run (local upstream)
	plot                        string        // write a chart of the run to this .svg or .png file
	concurrency                 int           // goroutines sending each tenant's requests (0: 1)
	inFlight                    int           // WithInFlight per tenant; 0: none
	latency                     time.Duration // the local upstream's time to answer, in Xero time
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var window, ids string
	fs := flag.NewFlagSet("xero_example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Float64Var(&c.scale, "scale", 10, "time compression, 1 to 100: 10 runs Xero's 60 per 60 s as 60 per 6 s; 1 is real time")
	fs.IntVar(&c.tenants, "tenants", 3, "number of tenants (local upstream)")
	fs.IntVar(&c.requests, "requests", 150, "requests per tenant (more than the minute limit, so pacing shows)")
	fs.IntVar(&c.burst, "burst", 10, "requests sent back to back after each wait (1..60)")
	fs.DurationVar(&c.margin, "margin", time.Second, "safety margin added to every window, in Xero time (never less than 10ms of real time): the upstream counts a request a moment after we record it")
	fs.StringVar(&window, "upstream-window", "rolling", "how the local upstream counts the minute: rolling (strict) or fixed (aligned windows)")
	fs.DurationVar(&c.progress, "progress", time.Second, "progress print interval, real time (0 turns it off)")
	fs.StringVar(&c.baseURL, "base-url", "", "a real API base URL (e.g. https://api.xero.com) instead of the local upstream")
	fs.StringVar(&c.path, "path", "/api.xro/2.0/Invoices", "path to GET")
	fs.StringVar(&c.token, "token", os.Getenv("XERO_TOKEN"), "bearer token for -base-url (default $XERO_TOKEN)")
	fs.StringVar(&ids, "tenant-ids", "", "comma-separated tenant ids for -base-url")
	fs.StringVar(&c.dynamoEndpoint, "dynamodb-endpoint", "", "DynamoDB API URL (e.g. http://127.0.0.1:8000 for dynalite): keep the counts in DynamoDB, like -redis; needs a build with -tags dynamodb (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, region from AWS_REGION)")
	fs.StringVar(&c.dynamoTable, "dynamodb-table", "ratemonitor", "DynamoDB table for -dynamodb-endpoint (partition key pk, a string); created when missing")
	fs.StringVar(&c.redisAddr, "redis", "", "Redis address (host:port): keep the counts there and reserve each burst there, so several copies of this program share one allocation per tenant (each copy still starts its own local upstream unless -base-url is set)")
	fs.BoolVar(&c.sync, "sync", false, "learn from the upstream's answers (X-*Limit-Remaining raise our counts, a 429 pauses the tenant until its Retry-After) and retry failed calls through go-retryablehttp, paced by the monitor")
	fs.IntVar(&c.foreign, "foreign", 0, "calls per tenant that another app made just before the run, which this program cannot see (local upstream only): without -sync they cause 429s")
	fs.StringVar(&c.plot, "plot", "", "write a chart of the run to this file, .svg or .png: per tenant, requests per second and the calls in the trailing minute against the limit, 429s marked")
	fs.IntVar(&c.concurrency, "concurrency", 10, "goroutines sending each tenant's requests at once (1..60)")
	fs.DurationVar(&c.latency, "latency", 300*time.Millisecond, "how long the local upstream takes to answer a call, in Xero time: the call is in progress meanwhile")
	fs.IntVar(&c.inFlight, "in-flight", xeroConcurrent, "most requests of one tenant in flight at once (ratemonitor.WithInFlight; Xero allows 5); 0 turns the limit off")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.dynamoEndpoint != "" && !set["in-flight"] {
		// The DynamoDB store holds no in-flight leases: keep within Xero's 5 in progress by
		// sending with at most 5 goroutines per tenant instead.
		c.inFlight = 0
		if !set["concurrency"] {
			c.concurrency = xeroConcurrent
		}
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: every setting is a flag (see -h)", fs.Arg(0))
	}
	switch window {
	case "rolling":
	case "fixed":
		c.fixed = true
	default:
		return c, fmt.Errorf("-upstream-window %q: want rolling or fixed", window)
	}
	if ids != "" {
		for _, id := range strings.Split(ids, ",") {
			if id = strings.TrimSpace(id); id != "" {
				c.tenantIDs = append(c.tenantIDs, id)
			}
		}
	}
	switch {
	case !(c.scale >= 1 && c.scale <= 100): // also refuses NaN
		return c, fmt.Errorf("-scale %v: want a number from 1 to 100", c.scale)
	case c.progress < 0:
		return c, fmt.Errorf("-progress %v: want a positive interval, or 0 to turn progress off", c.progress)
	case c.baseURL == "" && ids != "":
		return c, errors.New("-tenant-ids goes with -base-url; the local upstream uses -tenants")
	case c.tenants < 1 && c.baseURL == "":
		return c, fmt.Errorf("-tenants %d: want at least 1", c.tenants)
	case c.requests < 1:
		return c, fmt.Errorf("-requests %d: want at least 1", c.requests)
	case c.burst < 1 || c.burst > xeroMinuteLimit:
		return c, fmt.Errorf("-burst %d: want 1..%d (a larger burst can never fit the minute limit)", c.burst, xeroMinuteLimit)
	case c.foreign < 0 || c.foreign > xeroMinuteLimit:
		return c, fmt.Errorf("-foreign %d: want 0..%d", c.foreign, xeroMinuteLimit)
	case c.foreign > 0 && c.baseURL != "":
		return c, errors.New("-foreign goes with the local upstream, not -base-url")
	case c.concurrency < 1 || c.concurrency > xeroMinuteLimit:
		return c, fmt.Errorf("-concurrency %d: want 1..%d", c.concurrency, xeroMinuteLimit)
	case c.latency < 0:
		return c, fmt.Errorf("-latency %v: must not be negative", c.latency)
	case c.inFlight < 0:
		return c, fmt.Errorf("-in-flight %d: want at least 1, or 0 for no limit", c.inFlight)
	case c.inFlight > 0 && c.dynamoEndpoint != "":
		return c, errors.New("-dynamodb-endpoint and -in-flight: the DynamoDB store holds no in-flight leases; leave -in-flight out (then -concurrency is 5 by default), or use -redis")
	case c.margin < 0:
		return c, fmt.Errorf("-margin %v: must not be negative", c.margin)
	case c.baseURL != "" && (c.token == "" || len(c.tenantIDs) == 0):
		return c, errors.New("-base-url needs -token (or $XERO_TOKEN) and -tenant-ids")
	case c.baseURL != "" && c.scale != 1:
		return c, errors.New("-base-url talks to a real API: use -scale 1")
	}
	if c.plot != "" {
		if err := checkPlotPath(c.plot); err != nil {
			return c, err
		}
	}
	if c.baseURL != "" {
		u, err := url.Parse(c.baseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("-base-url %q: want an http or https URL such as https://api.xero.com", c.baseURL)
		}
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "xero_example:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sum, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "xero_example:", err)
		os.Exit(1)
	}
	if sum.tooMany > 0 || sum.failed > 0 {
		os.Exit(1)
	}
}

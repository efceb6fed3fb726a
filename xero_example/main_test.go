package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunNo429: the main job, 60× faster than Xero, ends with every request sent, no 429, the
// upstream never seeing more than 60 in a minute window, and close to the limit's throughput.
// The margin of 6 s of Xero time (100 ms real) covers a loaded, -race CI machine.
func TestRunNo429(t *testing.T) {
	for _, window := range []string{"rolling", "fixed"} {
		t.Run(window, func(t *testing.T) {
			cfg, err := parseFlags([]string{"-scale", "60", "-progress", "200ms", "-upstream-window", window, "-margin", "6s"}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			sum, err := run(context.Background(), cfg, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if sum.sent != 450 || sum.tooMany != 0 || sum.failed != 0 {
				t.Fatalf("sent %d, 429s %d, failures %d\n%s", sum.sent, sum.tooMany, sum.failed, out.String())
			}
			for id, p := range sum.peaks {
				if p > 60 {
					t.Errorf("%s: upstream peak %d in one minute window", id, p)
				}
			}
			if len(sum.peaks) != 3 {
				t.Errorf("peaks for %d tenants, want 3", len(sum.peaks))
			}
			// 150 requests need 2 windows of 1 s; pacing may not beat that, and should not
			// lose more than the margin and bucket lateness of 2 rounds plus scheduling.
			if sum.elapsed < sum.minimum || sum.elapsed > sum.minimum+time.Second {
				t.Errorf("elapsed %v, minimum %v", sum.elapsed, sum.minimum)
			}
			for _, want := range []string{"429s received   0", "achieved rate", "tenant-3", "upstream peak"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestUpstreamEnforces: the stand-in really answers 429 like Xero, so a run with none means
// the pacing worked.
func TestUpstreamEnforces(t *testing.T) {
	up := newUpstream(60, false)
	srv := httptest.NewServer(up)
	defer srv.Close()
	get := func(tenant string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api.xro/2.0/Invoices", nil)
		if tenant != "" {
			req.Header.Set("Xero-Tenant-Id", tenant)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := range 60 {
		resp := get("a")
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: %d", i+1, resp.StatusCode)
		}
		if got, want := resp.Header.Get("X-MinLimit-Remaining"), 59-i; got != strconv.Itoa(want) {
			t.Fatalf("call %d: X-MinLimit-Remaining %s, want %d", i+1, got, want)
		}
	}
	resp := get("a")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Rate-Limit-Problem") != "minute" ||
		resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-DayLimit-Remaining") != "4940" {
		t.Errorf("61st call: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get("b"); resp.StatusCode != 200 || resp.Header.Get("X-AppMinLimit-Remaining") != "9939" {
		t.Errorf("another tenant: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get(""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no tenant: %d", resp.StatusCode)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

func TestFlags(t *testing.T) {
	bad := [][]string{
		{"-scale", "0"}, {"-burst", "61"}, {"-burst", "0"}, {"-requests", "0"}, {"-tenants", "0"},
		{"-upstream-window", "sliding"}, {"-margin", "-1s"},
		{"-base-url", "https://api.xero.com", "-scale", "1"},
		{"-base-url", "https://api.xero.com", "-token", "t", "-tenant-ids", "x"},
		{"-scale", "NaN"}, {"-scale", "101"}, {"-progress", "-1s"}, {"-tenant-ids", "x"}, {"stray"},
		{"-base-url", "ftp://x", "-token", "t", "-tenant-ids", "a", "-scale", "1"},
		{"-concurrency", "0"}, {"-concurrency", "61"}, {"-in-flight", "-1"}, {"-latency", "-1s"},
		{"-dynamodb-endpoint", "http://127.0.0.1:1", "-in-flight", "5"},
		{"-foreign", "-1"}, {"-foreign", "61"}, {"-foreign", "5", "-base-url", "https://api.xero.com", "-token", "t", "-tenant-ids", "a", "-scale", "1"},
	}
	for _, args := range bad {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if c, err := parseFlags([]string{"-dynamodb-endpoint", "http://127.0.0.1:1"}, &bytes.Buffer{}); err != nil || c.inFlight != 0 || c.concurrency != 5 {
		t.Errorf("-dynamodb-endpoint: in-flight %d, concurrency %d, %v, want 0 and 5 (no leases there)", c.inFlight, c.concurrency, err)
	}
	if c, err := parseFlags(nil, &bytes.Buffer{}); err != nil || c.inFlight != 5 || c.concurrency != 10 {
		t.Errorf("defaults: in-flight %d, concurrency %d, %v, want 5 and 10", c.inFlight, c.concurrency, err)
	}
	c, err := parseFlags([]string{"-base-url", "https://api.xero.com", "-token", "t", "-tenant-ids", "x, y", "-scale", "1"}, &bytes.Buffer{})
	if err != nil || len(c.tenantIDs) != 2 || c.tenantIDs[1] != "y" {
		t.Errorf("real API flags: %+v %v", c, err)
	}
}

// TestRunReportsFailures: requests that fail are counted and the first cause is shown.
func TestRunReportsFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no token", http.StatusUnauthorized)
	}))
	defer srv.Close()
	cfg, err := parseFlags([]string{"-base-url", srv.URL, "-token", "t", "-tenant-ids", "a", "-scale", "1",
		"-requests", "3", "-progress", "0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.failed != 3 || !strings.Contains(out.String(), "first failure   a: HTTP 401 Unauthorized") {
		t.Errorf("failed %d, output:\n%s", sum.failed, out.String())
	}
}

// TestRunOnRedis: the main job with its counts in the test's own redis-server.
func TestRunOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg, err := parseFlags([]string{"-scale", "60", "-progress", "0", "-redis", srv.Addr, "-tenants", "2", "-requests", "100", "-margin", "6s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if sum.sent != 200 || sum.tooMany != 0 || sum.failed != 0 || !strings.Contains(out.String(), "counts kept in Redis") {
		t.Fatalf("sent %d, 429s %d, failures %d\n%s", sum.sent, sum.tooMany, sum.failed, out.String())
	}
	if _, err := run(context.Background(), config{scale: 60, tenants: 1, requests: 1, burst: 1, redisAddr: "127.0.0.1:1", path: "/"}, &out); err == nil {
		t.Error("an unreachable -redis was accepted")
	}
}

// TestRunDynamoDBNeedsTag: without -tags dynamodb the program has no DynamoDB store and says
// how to build one, instead of running on memory.
func TestRunDynamoDBNeedsTag(t *testing.T) {
	if openDynamo != nil {
		t.Skip("built with -tags dynamodb: TestRunOnDynamoDB covers the store")
	}
	cfg, err := parseFlags([]string{"-scale", "60", "-progress", "0", "-dynamodb-endpoint", "http://127.0.0.1:1", "-tenants", "1", "-requests", "1"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(context.Background(), cfg, &bytes.Buffer{}); !errors.Is(err, errNoDynamo) || !strings.Contains(err.Error(), "go run -tags dynamodb ./xero_example") {
		t.Errorf("-dynamodb-endpoint without the tag: %v, want errNoDynamo naming the tag", err)
	}
}

// TestTwoCopiesShareRedis: two runs of the main job share one Redis and one strict upstream;
// reserving each burst in Redis keeps them, together, within Xero's limits.
func TestTwoCopiesShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	// A margin of 6 s of Xero time (100 ms real) covers the delay from recording a request to
	// the upstream counting it on a loaded, -race CI machine.
	tm := newTiming(60, 6*time.Second)
	up := newUpstream(60, false)
	up.minute, up.day = tm.minute, tm.day
	shared := httptest.NewServer(up)
	defer shared.Close()
	cfg := config{scale: 60, requests: 100, burst: 10, margin: 6 * time.Second, path: "/api.xro/2.0/Invoices",
		baseURL: shared.URL, tenantIDs: []string{"tenant-a", "tenant-b"}, redisAddr: srv.Addr}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			var out bytes.Buffer
			if sum, err := run(context.Background(), cfg, &out); err != nil || sum.sent != 200 || sum.tooMany != 0 {
				t.Errorf("copy: %v, sent %d, 429s %d\n%s", err, sum.sent, sum.tooMany, out.String())
			}
		})
	}
	wg.Wait()
	accepted, refused, peaks := up.stats()
	if accepted != 400 || refused != 0 {
		t.Errorf("upstream accepted %d, refused %d", accepted, refused)
	}
	for id, p := range peaks {
		if p > 60 {
			t.Errorf("%s: %d in one minute window", id, p)
		}
	}
	t.Logf("peaks %v", peaks)
}

// TestSyncLearnsOfForeignCalls: another app has used 30 of each tenant's minute. Counting
// alone, the example runs into 30 429s per tenant; with -sync the first response's
// X-MinLimit-Remaining raises the count and the upstream sends no 429 at all.
func TestSyncLearnsOfForeignCalls(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			args := []string{"-scale", "60", "-tenants", "2", "-requests", "90", "-foreign", "30", "-progress", "0", "-margin", "6s"}
			if sync {
				args = append(args, "-sync")
			}
			cfg, err := parseFlags(args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			sum, err := run(context.Background(), cfg, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !sync {
				if sum.tooMany == 0 {
					t.Fatalf("without -sync the foreign calls caused no 429: the test cannot tell sync from luck\n%s", out.String())
				}
				return
			}
			if sum.sent != 180 || sum.tooMany != 0 || sum.upstreamRefused != 0 || sum.failed != 0 {
				t.Fatalf("with -sync: sent %d, 429s %d (upstream sent %d), failures %d\n%s", sum.sent, sum.tooMany, sum.upstreamRefused, sum.failed, out.String())
			}
			for id, p := range sum.peaks {
				if p > 60 {
					t.Errorf("%s: upstream peak %d", id, p)
				}
			}
			for _, want := range []string{"the upstream last said", "xero-app", "429s sent       0"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

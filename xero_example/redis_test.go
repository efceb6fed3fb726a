package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
)

// TestRunOnRedisNo429: the main job with its counts in the test's own redis-server.
func TestRunOnRedisNo429(t *testing.T) {
	srv := redistest.Start(t)
	cfg, err := parseFlags([]string{"-scale", "60", "-progress", "0", "-redis", srv.Addr, "-tenants", "2", "-requests", "100", "-margin", testMargin.String()}, &bytes.Buffer{})
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

// TestTwoCopiesSharingRedisStayWithinLimits: two runs of the main job share one Redis and one
// strict upstream; reserving each burst in Redis keeps them, together, within Xero's limits.
func TestTwoCopiesSharingRedisStayWithinLimits(t *testing.T) {
	srv := redistest.Start(t)
	// The margin (testMargin) covers the delay from recording a request to
	// the upstream counting it on a loaded, -race CI machine.
	tm := newTiming(60, testMargin)
	up := newUpstream(60, false)
	up.minute, up.day = tm.minute, tm.day
	shared := httptest.NewServer(up)
	defer shared.Close()
	cfg := config{scale: 60, requests: 100, burst: 10, margin: testMargin, path: "/api.xro/2.0/Invoices",
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

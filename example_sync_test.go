package ratemonitor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// WithSync learns from what the upstream says. Here a Xero-like upstream has already counted
// 20 calls of the tenant this minute (another program's), and says so in
// X-MinLimit-Remaining: after one request of ours the count is raised to the upstream's.
func ExampleWithSync() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-MinLimit-Remaining", "39") // 60 − 21
		w.Header().Set("X-DayLimit-Remaining", "4979")
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(
			strategy.Rule{Limit: 60, Window: time.Minute},
			strategy.Rule{Limit: 5000, Window: 24 * time.Hour}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}), // Xero's and the IETF fields by default
		ratemonitor.WithClock(clock.NewManual(time.Unix(1_800_000_000, 0))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Xero-Tenant-Id", "tenant-1")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	st, err := tr.Status(context.Background(), "tenant-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range st.Rules {
		fmt.Printf("%v: %d used, %d remaining (the upstream said %d)\n", u.Rule, u.Used, u.Remaining, u.Reported)
	}
	// Output:
	// 60/1m0s: 21 used, 39 remaining (the upstream said 39)
	// 5000/24h0m0s: 21 used, 4979 remaining (the upstream said 4979)
}

// SyncConfig picks the readers. An upstream that writes the older X-RateLimit-* fields does
// not say their window: XRateLimitWindow does (an hour, as at GitHub, whose reset is in epoch
// seconds). A 429's Retry-After pauses the key: WaitTime says how long.
func ExampleSyncConfig() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	var refuse atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "4900")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(clk.Now().Add(30*time.Minute).Unix(), 10))
		if refuse.Load() {
			w.Header().Set("Retry-After", "90")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "token-1" }),
		ratemonitor.WithSync(ratemonitor.SyncConfig{
			XRateLimitWindow: time.Hour,
			XRateLimitReset:  headers.ResetEpoch,
		}),
		ratemonitor.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	ctx := context.Background()

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	used, err := tr.AllocationUsed(ctx, "token-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("used:", used[0].Used)

	refuse.Store(true)
	resp, err = client.Do(req) // the same request again, now refused
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	wait, err := tr.WaitTime(ctx, "token-1", 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after a 429: wait", wait)
	// Output:
	// used: 100
	// after a 429: wait 1m30s
}

// Status is the view of a key for a dashboard: per rule what is used, left and last
// reported, the pause the upstream asked for, the wait, and the same for the app key. Here a
// Xero-like upstream refuses the tenant's third call for its minute limit, for 30 s: the
// minute rule is used up until then, and the key paused.
func ExampleTransport_Status() {
	start := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(start)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := calls.Add(1)
		if n < 3 { // another program of the tenant has made 1 call
			w.Header().Set("X-MinLimit-Remaining", strconv.Itoa(int(60-1-n)))
		} else {
			w.Header().Set("Retry-After", "30")
			w.Header().Set("X-Rate-Limit-Problem", "minute")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithAppRules("xero-app:example", strategy.Rule{Limit: 10_000, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}),
		ratemonitor.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	for range 3 {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		req.Header.Set("Xero-Tenant-Id", "tenant-1")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	clk.Advance(10 * time.Second)

	st, err := tr.Status(context.Background(), "tenant-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range st.Rules {
		fmt.Printf("%s %v: %d used, %d remaining; reported %d at +%v\n",
			st.Key, u.Rule, u.Used, u.Remaining, u.Reported, u.ReportedAt.Sub(start))
	}
	fmt.Printf("paused until +%v, wait %v\n", st.PausedUntil.Sub(start), st.Wait)
	fmt.Printf("%s: %d used\n", st.Meters[0].Key, st.Meters[0].Rules[0].Used)
	// Output:
	// tenant-1 60/1m0s: 60 used, 0 remaining; reported 0 at +0s
	// paused until +30s, wait 20s
	// xero-app:example: 3 used
}

// WithAppRules counts every request under an app-wide key too, with rules of its own (Xero's
// 10 000 a minute across all tenants): here 4 a minute for the app, 3 for each tenant. Two
// tenants' requests fill the app's minute, so a third tenant must wait though its own count
// is 0.
func ExampleWithAppRules() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 3, Window: time.Minute}),
		ratemonitor.WithAppRules("my-app", strategy.Rule{Limit: 4, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithClock(clock.NewManual(time.Unix(1_800_000_000, 0))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	for _, tenant := range []string{"tenant-1", "tenant-2", "tenant-1", "tenant-2"} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		req.Header.Set("Xero-Tenant-Id", tenant)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	ctx := context.Background()
	st, err := tr.Status(ctx, "tenant-3")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("tenant-3 used:", st.Rules[0].Used, "app used:", st.Meters[0].Rules[0].Used)
	wait, err := tr.WaitTime(ctx, "tenant-3", 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("tenant-3 waits", wait)
	// Output:
	// tenant-3 used: 0 app used: 4
	// tenant-3 waits 1m0s
}

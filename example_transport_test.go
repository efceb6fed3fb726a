package ratemonitor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// New makes a monitoring Transport: it counts every request under its key (here the tenant
// header) and sends it at once. Make it once, at start-up, and share the client: the counts
// live in the Transport (or in its store), so a Transport per call would start from zero.
func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()

	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)))
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
	used, err := tr.AllocationUsed(context.Background(), "tenant-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("tenant-1: %d used, %d remaining of %v\n", used[0].Used, used[0].Remaining, used[0].Rule)
	// Output: tenant-1: 3 used, 57 remaining of 60/1m0s
}

// New's errors name the option at fault and say what to do.
func ExampleNew_error() {
	_, err := ratemonitor.New(nil, ratemonitor.WithRules(strategy.Rule{Limit: 0, Window: time.Minute}))
	fmt.Println(err)
	// Output: ratemonitor: WithRules: invalid rule 0/1m0s: limit is 0, it must be at least 1
}

// In monitoring mode nothing waits: the caller asks WaitSeconds before a burst and decides.
// Here 5 requests in a 10 s window, sent at once, leave room for none for 10 s. The clock is a
// manual one, so that the output is exact; a real program leaves it out.
func ExampleTransport_WaitSeconds() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 5, Window: 10 * time.Second}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	ctx := context.Background()

	secs, err := tr.WaitSeconds(ctx, "tenant-1", 5)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("before:", secs, "s")
	for range 5 {
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
	secs, err = tr.WaitSeconds(ctx, "tenant-1", 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after 5:", secs, "s")
	clk.Advance(4 * time.Second)
	secs, err = tr.WaitSeconds(ctx, "tenant-1", 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("4 s later:", secs, "s")
	_, err = tr.WaitSeconds(ctx, "tenant-1", 6)
	fmt.Println("a burst of 6:", errors.Is(err, strategy.ErrBurstTooLarge))
	// Output:
	// before: 0 s
	// after 5: 10 s
	// 4 s later: 6 s
	// a burst of 6: true
}

// AllocationUsed gives, per rule, what a key has used and has left. In monitoring mode a key
// can go over a limit (the Transport only counts): Used then passes the limit and Remaining
// stays at 0.
func ExampleTransport_AllocationUsed() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(
			strategy.Rule{Limit: 3, Window: 10 * time.Second},
			strategy.Rule{Limit: 100, Window: time.Hour}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithClock(clock.NewManual(time.Unix(1_800_000_000, 0))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	for range 4 {
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
	used, err := tr.AllocationUsed(context.Background(), "tenant-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range used {
		fmt.Printf("%v: %d used, %d remaining\n", u.Rule, u.Used, u.Remaining)
	}
	// Output:
	// 3/10s: 4 used, 0 remaining
	// 100/1h0m0s: 4 used, 96 remaining
}

// With WithPacing a request waits for its slot instead of going over: 2 a second, so the
// third and fourth requests go a second after the first two, the fifth a second later. The
// manual clock with Auto set makes the waits move it instead of sleeping.
func ExampleWithPacing() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	start := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(start)
	clk.Auto = true
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 2, Window: time.Second}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithPacing(),
		ratemonitor.WithClock(clk)) // a real program leaves the clock out
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	for i := 1; i <= 5; i++ {
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
		fmt.Printf("request %d sent at +%v\n", i, clk.Now().Sub(start))
	}
	// Output:
	// request 1 sent at +0s
	// request 2 sent at +0s
	// request 3 sent at +1s
	// request 4 sent at +1s
	// request 5 sent at +2s
}

// Wait sleeps until a burst fits, without reserving it: for a monitoring Transport whose
// caller sends at its own pace. A context whose deadline comes before the burst fits gets a
// *DeadlineError at once, without waiting for nothing.
func ExampleTransport_Wait() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	start := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(start)
	clk.Auto = true
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 5, Window: 10 * time.Second}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	for range 5 {
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

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err = tr.Wait(ctx, "tenant-1", 2)
	cancel()
	var de *ratemonitor.DeadlineError
	fmt.Println("with 3 s to go:", errors.As(err, &de), errors.Is(err, context.DeadlineExceeded))

	if err := tr.Wait(context.Background(), "tenant-1", 2); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("2 more fit at +" + clk.Now().Sub(start).String())
	// Output:
	// with 3 s to go: true true
	// 2 more fit at +10s
}

// Reserve takes a burst of slots at once, waiting its turn (here the window is free), and the
// requests sent with the Reservation's context spend them instead of being counted again.
func ExampleTransport_Reserve() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithPacing(),
		ratemonitor.WithClock(clock.NewManual(time.Unix(1_800_000_000, 0))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	ctx := context.Background()

	r, err := tr.Reserve(ctx, "tenant-1", 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		req, err := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, srv.URL, nil)
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
	used, err := tr.AllocationUsed(ctx, "tenant-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("reservation left:", r.Remaining(), "used:", used[0].Used)
	// Output: reservation left: 0 used: 3
}

// Cancel gives back the slots no request spent: a batch reserved 5, sent 1, and stopped.
func ExampleReservation_Cancel() {
	tr, err := ratemonitor.New(nil,
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithPacing(),
		ratemonitor.WithClock(clock.NewManual(time.Unix(1_800_000_000, 0))))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	ctx := context.Background()
	r, err := tr.Reserve(ctx, "tenant-1", 5)
	if err != nil {
		fmt.Println(err)
		return
	}
	used, err := tr.AllocationUsed(ctx, "tenant-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("reserved:", used[0].Used)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	req, err := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, srv.URL, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req = req.WithContext(ratemonitor.WithKey(req.Context(), "tenant-1")) // the reservation's key
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()

	if err := r.Cancel(ctx); err != nil { // the batch stops: give back the other 4
		fmt.Println(err)
		return
	}
	used, err = tr.AllocationUsed(ctx, "tenant-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after Cancel:", used[0].Used, "used,", r.Remaining(), "left in the reservation")
	// Output:
	// reserved: 5
	// after Cancel: 1 used, 0 left in the reservation
}

package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// A client over its limit gets a 429 with Retry-After, the IETF RateLimit fields and a
// problem details body saying which rule refused it and when to retry. The store's clock is a
// manual one so that the output is exact; a real server leaves it out.
func Example_refused() {
	clk := clock.NewManual(time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC))
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	s, err := fixedwindow.New(strategy.Rule{Limit: 2, Window: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := middleware.New(store, s, middleware.WithKeyHeader("X-Client-Key"))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	defer srv.Close()

	for i := 1; i <= 3; i++ {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/reports", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		req.Header.Set("X-Client-Key", "client-7")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("request %d: %d, RateLimit: %s\n", i, resp.StatusCode, resp.Header.Get("RateLimit"))
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", resp.Header.Get("Retry-After"))
			fmt.Println("Content-Type:", resp.Header.Get("Content-Type"))
			fmt.Print(string(body))
		}
	}
	// Output:
	// request 1: 200, RateLimit: "2-per-10s";r=1;t=10
	// request 2: 200, RateLimit: "2-per-10s";r=0;t=10
	// request 3: 429, RateLimit: "2-per-10s";r=0;t=10
	// Retry-After: 10
	// Content-Type: application/problem+json
	// {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit \"2-per-10s\" (2 per 10s) is used up; retry after 10 s.","instance":"/reports"}
}

// The wrapped handler finds the key and the decision in its request's context.
func ExampleFromContext() {
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clock.NewManual(time.Unix(1_800_000_000, 0))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	s, err := fixedwindow.New(strategy.Rule{Limit: 100, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := middleware.New(store, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a, ok := middleware.FromContext(r.Context()); ok {
			fmt.Fprintf(w, "%s: %d remaining\n", a.Key, a.Decision.Rules[0].Remaining)
		}
	}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "203.0.113.9:50123"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	fmt.Print(w.Body.String())
	// Output: ip:203.0.113.9: 99 remaining
}

// Status tells a dashboard where a key stands, counting nothing.
func ExampleLimiter_Status() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	s, err := fixedwindow.New(strategy.Rule{Limit: 3, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := middleware.New(store, s, middleware.WithKeyHeader("X-Client-Key"))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := l.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Client-Key", "client-7")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	snap, err := l.Status(context.Background(), l.HeaderKey("client-7"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(l.HeaderKey("client-7"), snap.Usage[0].Used, "used, next in", snap.Wait)
	// Output: key:client-7 3 used, next in 1m0s
}

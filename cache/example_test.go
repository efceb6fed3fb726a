package cache_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// One memory store shared by two Transports of a process (say two clients of one API, with
// different timeouts) counts their requests together: each sees the other's. A Transport
// made without WithStore has a memory store of its own. The manual clock makes the output
// exact; a real program leaves it out.
func ExampleNewMemory() {
	store, err := cache.NewMemory(cache.MemoryConfig{
		MaxCost: 16 << 20, // 16 MiB of keys' state: about 23 000 keys of one minute rule
		Clock:   clock.NewManual(time.Unix(1_800_000_000, 0)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close() // the store is the caller's: closing a Transport leaves it open

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	rule := strategy.Rule{Limit: 60, Window: time.Minute}
	key := ratemonitor.WithKeyFunc(func(*http.Request) string { return "account-1" })
	fast, err := ratemonitor.New(srv.Client().Transport, ratemonitor.WithRules(rule), ratemonitor.WithStore(store), key)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fast.Close()
	slow, err := ratemonitor.New(srv.Client().Transport, ratemonitor.WithRules(rule), ratemonitor.WithStore(store), key)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer slow.Close()

	for _, c := range []*http.Client{{Transport: fast}, {Transport: slow, Timeout: time.Minute}, {Transport: slow}} {
		resp, err := c.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	used, err := fast.AllocationUsed(context.Background(), "account-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("account-1:", used[0].Used, "used")
	// Output: account-1: 3 used
}

// The memory store holds a server's counts for the middleware too (one process; the Redis
// and SQLite stores share them between processes).
func ExampleNewMemory_middleware() {
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clock.NewManual(time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	s, err := fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := middleware.New(store, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	h := l.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Printf("%d Retry-After: %q\n", w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After: ""
	// 429 Retry-After: "60"
}

// Stats counts what made the store's answers less than exact: keys evicted while they still
// counted, new keys refused. Both stay 0 while MaxCost holds the keys.
func ExampleMemory_Stats() {
	store, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	fmt.Printf("%+v\n", store.Stats())
	// Output: {EvictedLive:0 Rejected:0}
}

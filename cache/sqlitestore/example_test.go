package sqlitestore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// The processes of one host that open the same file share their counts: here two Stores on
// one file stand for two processes (a web server and a cron job calling one API for the
// same account). A real program opens a file of its own data directory and leaves out the
// clock (the default, the host's wall clock, is what every process on the host agrees on).
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sqlitestore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ratelimits.db") // say /var/lib/myapp/ratelimits.db
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	opts := sqlitestore.Options{
		Clock:       clk,
		BusyTimeout: 5 * time.Second,                                            // waiting for another process's write lock
		OnError:     func(err error) { log.Printf("ratelimit store: %v", err) }, // failed background prunes
	}
	ctx := context.Background()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	rule := strategy.Rule{Limit: 100, Window: time.Hour}
	var transports []*ratemonitor.Transport
	for range 2 { // one per process
		st, err := sqlitestore.Open(ctx, path, opts)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer st.Close() // the store is the caller's: closing a Transport leaves it open
		tr, err := ratemonitor.New(srv.Client().Transport, ratemonitor.WithRules(rule), ratemonitor.WithStore(st),
			ratemonitor.WithKeyFunc(func(*http.Request) string { return "account-1" }))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer tr.Close()
		transports = append(transports, tr)
	}
	for i, tr := range transports {
		for range i + 2 { // the first sends 2, the second 3
			resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
			if err != nil {
				fmt.Println(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for i, tr := range transports {
		used, err := tr.AllocationUsed(ctx, "account-1")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("process %d sees %d used, %d remaining\n", i+1, used[0].Used, used[0].Remaining)
	}
	// Output:
	// process 1 sees 5 used, 95 remaining
	// process 2 sees 5 used, 95 remaining
}

// A SQLite store holds a server's counts for the middleware, shared by the server's
// processes on the host (a pre-forking server, or several behind one port).
func ExampleOpen_middleware() {
	dir, err := os.MkdirTemp("", "sqlitestore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "limits.db"),
		sqlitestore.Options{Clock: clock.NewManual(time.Date(2027, 1, 15, 12, 0, 0, 0, time.UTC))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	s, err := fixedwindow.New(strategy.Rule{Limit: 2, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := middleware.New(st, s, middleware.WithKeyHeader("X-Client-Key"))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := l.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Client-Key", "client-7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Printf("%d RateLimit: %s\n", w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 RateLimit: "2-per-60s";r=1;t=60
	// 200 RateLimit: "2-per-60s";r=0;t=60
	// 429 RateLimit: "2-per-60s";r=0;t=60
}

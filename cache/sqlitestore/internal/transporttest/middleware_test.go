package transporttest

import (
	"bufio"
	"context"
	"database/sql"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/handlertest"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// start is the instant the tests' clocks start at: 1001.25 s after the Unix epoch, so a 1 s
// fixed window ends 0.75 s later, and a minute's 58.75 s later.
var start = time.Unix(1001, 250_000_000)

// The handler helpers of internal/handlertest, under the names these tests use.
type counting = handlertest.Counting

var must = handlertest.Must[*engine.Strategy]

// serve sends a GET of path from remote through h and returns the recorded response.
func serve(h http.Handler, path, remote string, header map[string]string) *httptest.ResponseRecorder {
	return handlertest.Serve(context.Background(), h, path, remote, header)
}

// TestFixedMultiRuleWaitingRetryAfterAdmitsSQLite: a fixed window of 1 a second and 2 a minute over
// SQLite (whose own arithmetic decides a fixed window): after a 200 and a 429, a client that waits
// the Retry-After it was given is admitted, not refused again (the refused attempt fills the minute
// rule, and Retry-After must count it). The memory store's twin stays in package middleware.
func TestFixedMultiRuleWaitingRetryAfterAdmitsSQLite(t *testing.T) {
	clk := clock.NewManual(start)
	st := openSQLite(t, sqlitestore.Options{Clock: clk})
	s := must(fixedwindow.New(
		strategy.Rule{Limit: 1, Window: time.Second},
		strategy.Rule{Limit: 2, Window: time.Minute},
	))
	lim, err := middleware.New(st, s)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := lim.Wrap(&counting{})
	if w := serve(wrapped, "/", "1.2.3.4:5", nil); w.Code != http.StatusOK {
		t.Fatalf("first: %d, want 200", w.Code)
	}
	w := serve(wrapped, "/", "1.2.3.4:5", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second: %d, want 429", w.Code)
	}
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", w.Header().Get("Retry-After"), err)
	}
	clk.Advance(time.Duration(ra) * time.Second)
	if w := serve(wrapped, "/", "1.2.3.4:5", nil); w.Code != http.StatusOK {
		t.Errorf("after waiting Retry-After=%d s: %d, Retry-After %s", ra, w.Code, w.Header().Get("Retry-After"))
	}
}

// TestAdmitPolicyServesNoCancelledClientSQLite: under OutagePolicy Admit over SQLite, five requests
// whose client hung up before they were served (context cancelled) run the handler at most once
// under a limit of 1: the client's own cancellation is not a store failure to fail open on.
func TestAdmitPolicyServesNoCancelledClientSQLite(t *testing.T) {
	clk := clock.NewManual(start)
	st := openSQLite(t, sqlitestore.Options{Clock: clk})
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	var reported []error
	lim, err := middleware.New(st, s, middleware.WithOutagePolicy(middleware.Admit),
		middleware.WithErrorHandler(func(_ *http.Request, err error) { reported = append(reported, err) }))
	if err != nil {
		t.Fatal(err)
	}
	h := &counting{}
	wrapped := lim.Wrap(h)
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client hung up
		r := httptest.NewRequest(http.MethodPost, "/expensive", nil).WithContext(ctx)
		r.RemoteAddr = "1.2.3.4:5"
		wrapped.ServeHTTP(httptest.NewRecorder(), r)
	}
	if h.Calls.Load() > 1 {
		t.Errorf("limit 1, but the handler ran %d times for cancelled requests (errors reported: %v)", h.Calls.Load(), reported)
	}
}

// TestAdmitPolicyServesNoHungUpClientWire: the same on a real wire. With the limit (1 an hour) used
// up and SQLite's one connection busy for 200 ms, three clients send a POST and hang up at once:
// under OutagePolicy Admit the handler does not run for them, and a normal client after is refused
// (429).
func TestAdmitPolicyServesNoHungUpClientWire(t *testing.T) {
	st := openSQLite(t, sqlitestore.Options{})
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Hour}))
	lim, err := middleware.New(st, s, middleware.WithOutagePolicy(middleware.Admit))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 10)
	srv := httptest.NewServer(lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran <- struct{}{} // e.g. an expensive side effect
	})))
	defer srv.Close()
	// Use up the limit.
	resp, err := http.Post(srv.URL+"/work", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-ran
	// The store is busy with something else for a moment (another request's transaction).
	var conn *sql.Conn
	if conn, err = st.DB().Conn(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"))
		c.Close() // hang up
	}
	time.Sleep(200 * time.Millisecond)
	conn.Close()
	time.Sleep(200 * time.Millisecond)
	// A normal client is refused, as it should be.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"))
	rr, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	rr.Body.Close()
	if len(ran) > 0 {
		t.Errorf("limit 1 per hour, used up; yet the handler ran %d more times for clients that hung up", len(ran))
	}
	if rr.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a normal client after: %d, want 429", rr.StatusCode)
	}
}

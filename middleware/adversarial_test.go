package middleware

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// BREAKER 1: a fixed-window strategy with two rules. The refused attempt is counted in every
// rule, so a rule that was exactly full *after* the refused attempt blocks the next attempt,
// but Retry-After only looks at the rules that were over. A client that waits Retry-After is
// refused again.
func TestFixedMultiRuleRetryAfterEarly(t *testing.T) {
	st, clk := newStore(t) // memory store, manual clock at 1001.25
	s := must(fixedwindow.New(
		strategy.Rule{Limit: 1, Window: time.Second},
		strategy.Rule{Limit: 2, Window: time.Minute},
	))
	h := &counting{}
	lim, err := New(st, s)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := lim.Wrap(h)
	if w := serve(wrapped, "/", "1.2.3.4:5", nil); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := serve(wrapped, "/", "1.2.3.4:5", nil)
	if w.Code != 429 {
		t.Fatalf("second: %d", w.Code)
	}
	ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	t.Logf("Retry-After %d, RateLimit %s", ra, w.Header().Get("RateLimit"))
	clk.Advance(time.Duration(ra) * time.Second)
	if w := serve(wrapped, "/", "1.2.3.4:5", nil); w.Code != 200 {
		t.Errorf("after waiting Retry-After=%d s the client is refused again: %d, Retry-After %s, body %s",
			ra, w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

// Same through the SQLite store (fixedAdmit's own arithmetic).
func TestFixedMultiRuleRetryAfterEarlySQLite(t *testing.T) {
	clk := clock.NewManual(start)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), sqlitestore.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := must(fixedwindow.New(
		strategy.Rule{Limit: 1, Window: time.Second},
		strategy.Rule{Limit: 2, Window: time.Minute},
	))
	lim, err := New(st, s)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := lim.Wrap(&counting{})
	serve(wrapped, "/", "1.2.3.4:5", nil)
	w := serve(wrapped, "/", "1.2.3.4:5", nil)
	ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	clk.Advance(time.Duration(ra) * time.Second)
	if w := serve(wrapped, "/", "1.2.3.4:5", nil); w.Code != 200 {
		t.Errorf("after waiting Retry-After=%d s: %d, Retry-After %s", ra, w.Code, w.Header().Get("Retry-After"))
	}
}

// BREAKER 2: FailOpen treats the client's own cancellation as a store failure and runs the
// handler uncounted: a client that hangs up right after sending gets its request served
// without it being counted.
func TestFailOpenCancelledClientBypasses(t *testing.T) {
	clk := clock.NewManual(start)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), sqlitestore.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	var reported []error
	lim, err := New(st, s, WithErrorPolicy(FailOpen), WithErrorHandler(func(_ *http.Request, err error) { reported = append(reported, err) }))
	if err != nil {
		t.Fatal(err)
	}
	h := &counting{}
	wrapped := lim.Wrap(h)
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // the client hung up
		r := httptest.NewRequest("POST", "/expensive", nil).WithContext(ctx)
		r.RemoteAddr = "1.2.3.4:5"
		wrapped.ServeHTTP(httptest.NewRecorder(), r)
	}
	if h.calls.Load() > 1 {
		t.Errorf("limit 1, but the handler ran %d times for cancelled requests (errors reported: %v)", h.calls.Load(), reported[0])
	}
}

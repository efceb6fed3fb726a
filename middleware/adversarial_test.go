package middleware

import (
	"strconv"
	"testing"
	"time"

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

// The same through the SQLite store (fixedAdmit's own arithmetic), and BREAKER 2 (Admit
// and a client that hung up), are in cache/sqlitestore/internal/transporttest: they need the
// SQLite store.

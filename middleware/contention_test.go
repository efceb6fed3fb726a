package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// contending is the memory store whose first fail Admits (all when fail < 0) lose an
// optimistic race: they record nothing and return an error wrapping cache.ErrContended. The
// Admit numbered hold, when set, returns only once its context has ended: a test can thus have
// the deadline pass during a retry, however slow the machine.
type contending struct {
	*cache.Memory
	fail  int64
	hold  int64
	calls atomic.Int64
}

func (c *contending) Admit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error) {
	k := c.calls.Add(1)
	if k == c.hold {
		<-ctx.Done()
	}
	if c.fail < 0 || k <= c.fail {
		return strategy.Decision{}, fmt.Errorf("%w: test store, try %d", cache.ErrContended, k)
	}
	return c.Memory.Admit(ctx, s, key, n)
}

// TestContentionRetriedThenServedOnce: under OutagePolicy Admit, a store Admit that loses 5 races
// is tried again until the sixth decides: the handler runs once, counted once, with its RateLimit
// fields, and the error handler is not called (contention is not an outage). Before the fix the
// first contention was let through: the handler ran uncounted.
func TestContentionRetriedThenServedOnce(t *testing.T) {
	mem, _ := newStore(t)
	st := &contending{Memory: mem, fail: 5}
	var reported atomic.Int64
	l, err := New(st, must(rollingwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})),
		WithOutagePolicy(Admit), WithErrorHandler(func(*http.Request, error) { reported.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	w := serve(l.Wrap(next), "/p", peer, nil)
	if w.Code != http.StatusOK || next.Calls.Load() != 1 || st.calls.Load() != 6 || reported.Load() != 0 {
		t.Errorf("status %d, handler called %d, Admit called %d, errors reported %d; want 200, 1, 6, 0",
			w.Code, next.Calls.Load(), st.calls.Load(), reported.Load())
	}
	wantHeader(t, w, map[string]string{"RateLimit": `"5-per-60s";r=4;t=60`})
}

// TestContentionUntilDeadlineAnswers503: under OutagePolicy Admit, a store Admit that keeps
// losing races until the request's context ends is answered 503 with Retry-After: 1, the
// handler never runs (nothing is served uncounted), and the error handler gets an error wrapping
// cache.ErrContended and context.DeadlineExceeded. The second Admit (the first retry) returns
// only at the deadline, so that at least one retry is seen however slow the machine; the
// deadline, 1 s, leaves the first Admit (microseconds) all the time it needs.
func TestContentionUntilDeadlineAnswers503(t *testing.T) {
	mem, _ := newStore(t)
	st := &contending{Memory: mem, fail: -1, hold: 2}
	var got []error
	l, err := New(st, must(rollingwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})),
		WithOutagePolicy(Admit), WithErrorHandler(func(_ *http.Request, err error) { got = append(got, err) }))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	r := httptest.NewRequest(http.MethodGet, "/p", nil)
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	r = r.WithContext(ctx)
	r.RemoteAddr = peer
	w := httptest.NewRecorder()
	deadline, _ := ctx.Deadline()
	l.Wrap(next).ServeHTTP(w, r)
	if early := time.Until(deadline); early > 0 {
		t.Errorf("answered %v before the context's deadline", early)
	}
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || next.Calls.Load() != 0 || st.calls.Load() < 2 {
		t.Errorf("status %d, Retry-After %q, handler called %d, Admit called %d; want 503, 1, 0, at least 2",
			w.Code, w.Header().Get("Retry-After"), next.Calls.Load(), st.calls.Load())
	}
	if len(got) != 1 || !errors.Is(got[0], cache.ErrContended) || !errors.Is(got[0], context.DeadlineExceeded) {
		t.Errorf("error handler got %v, want one error wrapping cache.ErrContended and context.DeadlineExceeded", got)
	}
}

// Four Limiters over one DynamoDB table, whose writers do race, are
// cache/dynamostore/internal/transporttest's TestMiddlewareDynamoContentionServesExactlyLimit.

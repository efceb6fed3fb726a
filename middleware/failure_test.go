package middleware

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

var errDown = errors.New("store down")

type ctxMark struct{}

// failing is the memory store with an Admit that fails. It checks that it is called with the
// request's context (serve's requests carry ctxMark) and a burst of 1.
type failing struct {
	*cache.Memory
	t *testing.T
}

func (f failing) Admit(ctx context.Context, _ *engine.Strategy, _ string, n int) (strategy.Decision, error) {
	if ctx.Value(ctxMark{}) != "req" || n != 1 {
		f.t.Errorf("Admit with context %v, n %d: want the request's context and 1", ctx, n)
	}
	return strategy.Decision{}, errDown
}

func TestStoreFailureFollowsOutagePolicy(t *testing.T) {
	s := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}))
	for _, c := range []struct {
		name   string
		policy []Option
		want   int
	}{
		{"default closed", nil, http.StatusServiceUnavailable},
		{"closed", []Option{WithOutagePolicy(Reject)}, http.StatusServiceUnavailable},
		{"open", []Option{WithOutagePolicy(Admit)}, http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem, _ := newStore(t)
			var got []error
			opts := append(c.policy, WithErrorHandler(func(r *http.Request, err error) {
				if r.URL.Path != "/p" {
					t.Errorf("error handler got request %s", r.URL.Path)
				}
				got = append(got, err)
			}))
			l, err := New(failing{mem, t}, s, opts...)
			if err != nil {
				t.Fatal(err)
			}
			next := &counting{}
			w := serve(l.Wrap(next), "/p", peer, nil)
			if len(got) != 1 || !errors.Is(got[0], errDown) {
				t.Errorf("error handler got %v, want the store's error", got)
			}
			if w.Header().Get("RateLimit") != "" || w.Header().Get("RateLimit-Policy") != "" {
				t.Errorf("RateLimit fields without a decision: %v", w.Header())
			}
			if c.want == http.StatusOK {
				if w.Code != 200 || next.Calls.Load() != 1 || w.Header().Get("Retry-After") != "" {
					t.Errorf("fail open: %d, next called %d times, Retry-After %q", w.Code, next.Calls.Load(), w.Header().Get("Retry-After"))
				}
				return
			}
			wantProblem(t, w, problemDetails{Type: "about:blank", Title: "Service Unavailable", Status: 503,
				Detail: "The rate limiter is unavailable; retry shortly.", Instance: "/p"})
			wantHeader(t, w, map[string]string{"Retry-After": "1"})
			if next.Calls.Load() != 0 {
				t.Errorf("fail closed called next")
			}
		})
	}
}

// A closed store fails every Admit: the real error path of cache.Memory.
func TestClosedStoreAnswers503(t *testing.T) {
	mem, _ := newStore(t)
	l, err := New(mem, must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})),
		WithErrorHandler(func(_ *http.Request, err error) {
			if !errors.Is(err, cache.ErrClosed) {
				t.Errorf("error %v, want ErrClosed", err)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	mem.Close()
	if w := serve(l.Wrap(&counting{}), "/", peer, nil); w.Code != http.StatusServiceUnavailable {
		t.Errorf("%d, want 503", w.Code)
	}
}

// storeOnly implements cache.Store but not cache.Admitter.
type storeOnly struct{ cache.Store }

func TestNewRefusesBadArguments(t *testing.T) {
	mem, _ := newStore(t)
	s := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}))
	var nilMem *cache.Memory
	for _, c := range []struct {
		name  string
		store cache.Store
		s     *engine.Strategy
		opts  []Option
	}{
		{"nil store", nil, s, nil},
		{"typed nil store", nilMem, s, nil},
		{"nil strategy", mem, nil, nil},
		{"not an admitter", storeOnly{mem}, s, nil},
		{"bad range", mem, s, []Option{WithTrustedProxies("X-Forwarded-For", "10.0.0.0/33")}},
		{"no ranges", mem, s, []Option{WithTrustedProxies("X-Forwarded-For")}},
		{"bad proxy header", mem, s, []Option{WithTrustedProxies("X-Real-IP", "10.0.0.0/8")}},
		{"ipv6 prefix 0", mem, s, []Option{WithIPv6Prefix(0)}},
		{"ipv6 prefix 129", mem, s, []Option{WithIPv6Prefix(129)}},
		{"key func and header", mem, s, []Option{WithKeyHeader("X-Key"), WithKeyFunc(func(*http.Request) (string, error) { return "k", nil })}},
		{"empty key header", mem, s, []Option{WithKeyHeader("")}},
		{"limit past 15 digits", mem, must(fixedwindow.New(strategy.Rule{Limit: 1_000_000_000_000_000, Window: time.Hour})), nil},
		{"key header with a space", mem, s, []Option{WithKeyHeader("X Client")}},
		{"empty key secret", mem, s, []Option{WithKeyHeader("X-Client"), WithKeySecret(nil)}},
		{"key secret without header", mem, s, []Option{WithKeySecret([]byte("s"))}},
		{"key secret and key func", mem, s, []Option{WithKeySecret([]byte("s")), WithKeyFunc(func(*http.Request) (string, error) { return "k", nil })}},
		{"names count", mem, s, []Option{WithPolicyNames("a", "b")}},
		{"empty name", mem, s, []Option{WithPolicyNames("")}},
		{"name not ascii", mem, s, []Option{WithPolicyNames("débit")}},
		{"names twice", mem, must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}, strategy.Rule{Limit: 50, Window: time.Hour})),
			[]Option{WithPolicyNames("a", "a")}},
		{"unknown policy", mem, s, []Option{WithOutagePolicy(7)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.store, c.s, c.opts...)
			if err == nil || l != nil {
				t.Fatalf("New = %v, %v; want an error", l, err)
			}
			t.Log(err)
		})
	}
}

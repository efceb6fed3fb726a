package middleware

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/handlertest"
	"github.com/ratemonitor/ratemonitor/internal/optionscan"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestOptionReusedInManyLimitersActsAsFresh passes each option to New four times, over two
// different strategies in turn, and serves the same requests through a Limiter made with the
// reused option and one made with a fresh one: every answer (status, fields, body) must be
// the same. An Option is a value: what one New does with it must not change the next.
func TestOptionReusedInManyLimitersActsAsFresh(t *testing.T) {
	fixed := handlertest.Must(fixedwindow.New(strategy.Rule{Limit: 2, Window: 10 * time.Second}))
	rolling := handlertest.Must(rollingwindow.New(strategy.Rule{Limit: 3, Window: time.Minute}))
	cases := []struct {
		name string
		make func() Option
	}{
		{"WithKeyFunc", func() Option {
			return WithKeyFunc(func(r *http.Request) (string, error) { return "k:" + r.Header.Get("X-Client-Key"), nil })
		}},
		{"WithKeyHeader", func() Option { return WithKeyHeader("X-Client-Key") }},
		{"WithIPv6Prefix", func() Option { return WithIPv6Prefix(48) }},
		{"WithTrustedProxies", func() Option { return WithTrustedProxies("X-Forwarded-For", "10.0.0.0/8") }},
		{"WithOutagePolicy", func() Option { return WithOutagePolicy(Admit) }},
		{"WithErrorHandler", func() Option { return WithErrorHandler(func(*http.Request, error) {}) }},
		{"WithPolicyNames", func() Option { return WithPolicyNames("per-client") }},
		{"WithProblemType", func() Option { return WithProblemType("https://example.com/problems/too-many") }},
		{"WithInstance", func() Option { return WithInstance(func(r *http.Request) string { return "/i" + r.URL.Path }) }},
		{"WithObserver", func() Option { return WithObserver(observe.Func(func(observe.Event) {})) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reused := c.make()
			for i, s := range []*engine.Strategy{fixed, rolling, fixed, rolling} {
				got := answers(t, s, []Option{reused})
				want := answers(t, s, []Option{c.make()})
				if got != want {
					t.Fatalf("New %d (%s): with the reused option the Limiter answered\n%s\nwant, as with a fresh one,\n%s", i+1, s.Name(), got, want)
				}
			}
		})
	}
	names := []string{"WithKeySecret"}
	for _, c := range cases {
		names = append(names, c.name)
	}
	for _, o := range exportedOptions(t) {
		if !slices.Contains(names, o) {
			t.Errorf("option %s is not in this test: add it", o)
		}
	}
	t.Run("WithKeySecret", func(t *testing.T) {
		secret := []byte("fleet secret")
		reused := WithKeySecret(secret)
		for i, s := range []*engine.Strategy{fixed, rolling, fixed, rolling} {
			got := answers(t, s, []Option{WithKeyHeader("Authorization"), reused})
			want := answers(t, s, []Option{WithKeyHeader("Authorization"), WithKeySecret([]byte("fleet secret"))})
			if got != want {
				t.Fatalf("New %d (%s): with the reused option the Limiter answered\n%s\nwant, as with a fresh one,\n%s", i+1, s.Name(), got, want)
			}
		}
	})
}

// answers makes a Limiter over a new memory store on a manual clock, serves it three requests
// of one client and returns what it answered, Date aside.
func answers(t *testing.T, s *engine.Strategy, opts []Option) string {
	t.Helper()
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clock.NewManual(time.Unix(1001, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := New(m, s, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	var b strings.Builder
	for range 3 {
		w := handlertest.Serve(context.Background(), h, "/a", "10.1.2.3:4000", map[string]string{
			"X-Client-Key": "c1", "Authorization": "Bearer t1", "X-Forwarded-For": "203.0.113.9"})
		fmt.Fprintf(&b, "%d %v %q\n", w.Code, headerOf(w), w.Body.String())
	}
	return b.String()
}

// exportedOptions lists the package's exported functions that return an Option, from its source.
func exportedOptions(t *testing.T) []string {
	t.Helper()
	names, err := optionscan.Constructors(".", "Option")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 11 {
		t.Fatalf("found %d options (%v): the source scan is broken", len(names), names)
	}
	return names
}

func headerOf(w *httptest.ResponseRecorder) http.Header {
	h := w.Header().Clone()
	h.Del("Date")
	return h
}

// TestVariadicOptionKeepsItsArguments: an option made from a slice holds a copy of it, so a
// caller who changes or reuses the slice afterwards does not change the option.
func TestVariadicOptionKeepsItsArguments(t *testing.T) {
	rolling := handlertest.Must(rollingwindow.New(strategy.Rule{Limit: 3, Window: time.Minute}))
	names, ranges := []string{"per-client"}, []string{"10.0.0.0/8"}
	opts := []Option{WithPolicyNames(names...), WithTrustedProxies("X-Forwarded-For", ranges...)}
	want := answers(t, rolling, []Option{WithPolicyNames("per-client"), WithTrustedProxies("X-Forwarded-For", "10.0.0.0/8")})
	names[0], ranges[0] = "", "not a range" // both refused by New, were they read now
	if got := answers(t, rolling, opts); got != want {
		t.Errorf("after the caller changed its slices the Limiter answered\n%s\nwant, as made,\n%s", got, want)
	}
}

package middlewaretest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// must returns s, or panics with err: the tests' rules are valid.
func must(s *engine.Strategy, err error) *engine.Strategy {
	if err != nil {
		panic(err)
	}
	return s
}

// counting is a handler that answers 200 "ok" and counts its calls.
type counting struct{ calls atomic.Int64 }

func (c *counting) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.calls.Add(1)
	_, _ = w.Write([]byte("ok"))
}

// serve sends a GET of path from remote through h, with ctx, and returns the recorded response.
func serve(ctx context.Context, h http.Handler, path, remote string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

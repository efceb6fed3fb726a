// Package handlertest serves requests through HTTP handlers in the middleware's tests: one
// copy for the middleware package and for the stores' modules' middleware tests (which reach
// it through the core's path prefix).
package handlertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
)

// Counting is a handler that answers 200 "ok" and counts its calls.
type Counting struct{ Calls atomic.Int64 }

func (c *Counting) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.Calls.Add(1)
	_, _ = w.Write([]byte("ok"))
}

// Serve sends a GET of path from remote, with ctx and the header fields given, through h, and
// returns the recorded response.
func Serve(ctx context.Context, h http.Handler, path, remote string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Must returns v, or panics with err: for what a test builds from values it knows are valid
// (its rules).
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

package middleware

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/handlertest"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The handler helpers of internal/handlertest, under the names these tests use.
type counting = handlertest.Counting

var must = handlertest.Must[*engine.Strategy]

// serve sends a GET of path from remote through h, its context marked (ctxMark) so that a test
// can see the handler got the request's own, and returns the recorded response.
func serve(h http.Handler, path, remote string, header map[string]string) *httptest.ResponseRecorder {
	return handlertest.Serve(context.WithValue(context.Background(), ctxMark{}, "req"), h, path, remote, header)
}

// start is the instant the tests' clocks start at: 1001.25 s after the Unix epoch, so a 10 s
// fixed window ends 8.75 s later.
var start = time.Unix(1001, 250_000_000)

// newStore returns a memory store on a manual clock standing at start, closed with the test.
func newStore(t *testing.T) (*cache.Memory, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(start)
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, clk
}

// wantHeader fails the test unless every field of want has exactly that value in w.
func wantHeader(t *testing.T, w *httptest.ResponseRecorder, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := w.Header().Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

// wantProblem fails the test unless w is a problem details response equal to want.
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, want problemDetails) {
	t.Helper()
	if w.Code != want.Status {
		t.Errorf("status %d, want %d", w.Code, want.Status)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var raw map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if len(raw) != 5 {
		t.Errorf("body has members %v, want type, title, status, detail, instance", raw)
	}
	var got problemDetails
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("problem\n got %+v\nwant %+v", got, want)
	}
}

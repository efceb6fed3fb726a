package middleware

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestNoCredentialLeaks: a Limiter keyed by Authorization over the memory store admits,
// refuses and fails (store closed) requests carrying a bearer token; the token appears in no
// response, Admission, event or error, and the handler sees the hashed key. The SQLite and
// Redis stores' parts, which also read the keys the store wrote, are in
// cache/sqlitestore/internal/transporttest and cache/redisstore/internal/middlewaretest.
func TestNoCredentialLeaks(t *testing.T) {
	rolling := must(rollingwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	mem, _ := newStore(t)
	got := &leakcheck.Seen{}
	var handled []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		handled = append(handled, a.Key)
	})
	run := func(codes ...int) {
		l, err := New(mem, rolling, WithKeyHeader("Authorization"), WithObserver(got), WithErrorHandler(got.OnError))
		if err != nil {
			t.Fatal(err)
		}
		if k := l.HeaderKey("Bearer " + leakcheck.Token); k != leakcheck.MiddlewareKey {
			t.Errorf("HeaderKey = %q, want %q", k, leakcheck.MiddlewareKey)
		}
		h := l.Wrap(handler)
		for _, want := range codes {
			w := serve(h, "/x", "192.0.2.1:1", map[string]string{"Authorization": "Bearer " + leakcheck.Token})
			got.Add(fmt.Sprintf("%d %v %s", w.Code, w.Header(), w.Body))
			if w.Code != want {
				t.Errorf("status %d, want %d", w.Code, want)
			}
		}
	}
	run(http.StatusOK, http.StatusTooManyRequests)
	if len(handled) != 1 || handled[0] != leakcheck.MiddlewareKey {
		t.Errorf("Admission.Key %q, want %q once", handled, leakcheck.MiddlewareKey)
	}

	// Store closed: 503 and an error for the handler.
	mem.Close()
	run(http.StatusServiceUnavailable)
	out := got.String()
	if strings.Contains(out, leakcheck.Token) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("Bearer "+leakcheck.Token))) {
		t.Errorf("the token appears in what was observed, handled or answered:\n%s", out)
	}
	for _, want := range []string{"admitted key=" + leakcheck.MiddlewareKey, "rejected key=" + leakcheck.MiddlewareKey, "503", "429", "store is closed"} {
		if !strings.Contains(out, want) {
			t.Errorf("nothing observed or answered contains %q: a path was not reached\n%s", want, out)
		}
	}
}

package middlewaretest

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestNoCredentialLeaks: a Limiter keyed by Authorization over the Redis store admits (200)
// and refuses (429) a request carrying a bearer token, and answers 503 once Redis is down; the
// handler sees the hashed key as Admission.Key, the hashed key (decoded from the store's key
// encoding) is in Redis, and the token is in no Redis key, response, event or error (the Redis
// part of the middleware's TestNoCredentialLeaks).
func TestNoCredentialLeaks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rolling := must(rollingwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: "leak"})
	if err != nil {
		t.Fatal(err)
	}
	got := &leakcheck.Seen{}
	var handled []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := middleware.FromContext(r.Context())
		handled = append(handled, a.Key)
	})
	run := func(codes ...int) {
		l, err := middleware.New(rs, rolling, middleware.WithKeyHeader("Authorization"), middleware.WithObserver(got), middleware.WithErrorHandler(got.OnError))
		if err != nil {
			t.Fatal(err)
		}
		if k := l.HeaderKey("Bearer " + leakcheck.Token); k != leakcheck.MiddlewareKey {
			t.Errorf("HeaderKey = %q, want %q", k, leakcheck.MiddlewareKey)
		}
		h := l.Wrap(handler)
		for _, want := range codes {
			w := serve(ctx, h, "/x", "192.0.2.1:1", map[string]string{"Authorization": "Bearer " + leakcheck.Token})
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

	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, k := range keys {
		stored = append(stored, k)
		if _, rest, ok := strings.Cut(k, "{k"); ok {
			enc, _, _ := strings.Cut(rest, "}")
			dec, _ := base64.RawURLEncoding.DecodeString(enc)
			stored = append(stored, "decoded: "+string(dec))
		}
	}
	all := strings.Join(stored, "\n")
	if strings.Count(all, leakcheck.MiddlewareKey) != 1 || strings.Contains(all, leakcheck.Token) {
		t.Errorf("stored keys, want the hashed key in Redis once, and no token:\n%s", all)
	}

	// Redis down: 503 and an error for the handler.
	srv.Stop()
	run(http.StatusServiceUnavailable)
	out := got.String()
	if strings.Contains(out, leakcheck.Token) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("Bearer "+leakcheck.Token))) {
		t.Errorf("the token appears in what was observed, handled or answered:\n%s", out)
	}
	for _, want := range []string{"admitted key=" + leakcheck.MiddlewareKey, "rejected key=" + leakcheck.MiddlewareKey, "503", "429"} {
		if !strings.Contains(out, want) {
			t.Errorf("nothing observed or answered contains %q: a path was not reached\n%s", want, out)
		}
	}
}

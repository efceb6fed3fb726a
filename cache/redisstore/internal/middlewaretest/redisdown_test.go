package middlewaretest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestRedisDownAnswers503Promptly: a Limiter (default Reject) over Redis with 2 a minute answers 200, 200,
// 429; once the server is killed it answers 503 with a Retry-After, promptly (the client does
// not retry), and the handler ran only for the two admitted requests.
func TestRedisDownAnswers503Promptly(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := middleware.New(st, must(rollingwindow.New(strategy.Rule{Limit: 2, Window: time.Minute})))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	h := lim.Wrap(next)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var codes []int
	for range 3 {
		codes = append(codes, serve(ctx, h, "/", "1.2.3.4:1", nil).Code)
	}
	srv.Stop()
	t0 := time.Now()
	w := serve(ctx, h, "/", "1.2.3.4:1", nil)
	took := time.Since(t0)
	codes = append(codes, w.Code)
	t.Logf("codes %v, down answer after %v, Retry-After %q", codes, took, w.Header().Get("Retry-After"))
	want := []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable}
	if len(codes) != len(want) || codes[0] != want[0] || codes[1] != want[1] || codes[2] != want[2] || codes[3] != want[3] {
		t.Errorf("codes %v, want %v", codes, want)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After: %v", w.Header())
	}
	if n := next.Calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2 (the admitted requests only)", n)
	}
	// A refused connection is answered at once; 5 s leaves room for a loaded machine.
	if took > 5*time.Second {
		t.Errorf("the 503 took %v, want it promptly", took)
	}
}

package middleware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/internal/dynalitetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// contending is the memory store whose first fail Admits (all when fail < 0) lose an
// optimistic race: they record nothing and return an error wrapping cache.ErrContended.
type contending struct {
	*cache.Memory
	fail  int64
	calls atomic.Int64
}

func (c *contending) Admit(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Decision, error) {
	if k := c.calls.Add(1); c.fail < 0 || k <= c.fail {
		return strategy.Decision{}, fmt.Errorf("%w: test store, try %d", cache.ErrContended, k)
	}
	return c.Memory.Admit(ctx, s, key, n)
}

// TestContentionRetried: under FailOpen, an Admit that loses 5 races is tried again until the
// sixth decides: the handler runs once, counted once, with its RateLimit fields, and the error
// handler is not called (contention is not an outage). Before the fix the first contention
// was FailOpen'd: the handler ran uncounted.
func TestContentionRetried(t *testing.T) {
	mem, _ := newStore(t)
	st := &contending{Memory: mem, fail: 5}
	var reported atomic.Int64
	l, err := New(st, must(rollingwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})),
		WithErrorPolicy(FailOpen), WithErrorHandler(func(*http.Request, error) { reported.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	w := serve(l.Wrap(next), "/p", peer, nil)
	if w.Code != http.StatusOK || next.calls.Load() != 1 || st.calls.Load() != 6 || reported.Load() != 0 {
		t.Errorf("status %d, handler called %d, Admit called %d, errors reported %d; want 200, 1, 6, 0",
			w.Code, next.calls.Load(), st.calls.Load(), reported.Load())
	}
	wantHeader(t, w, map[string]string{"RateLimit": `"5-per-60s";r=4;t=60`})
}

// TestContentionPastDeadline: under FailOpen, an Admit that keeps losing races until the
// request's context ends (100 ms) is answered 503 with Retry-After: 1, the handler never runs
// (nothing is served uncounted), and the error handler gets an error wrapping
// cache.ErrContended and context.DeadlineExceeded.
func TestContentionPastDeadline(t *testing.T) {
	mem, _ := newStore(t)
	st := &contending{Memory: mem, fail: -1}
	var got []error
	l, err := New(st, must(rollingwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})),
		WithErrorPolicy(FailOpen), WithErrorHandler(func(_ *http.Request, err error) { got = append(got, err) }))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	r := httptest.NewRequest(http.MethodGet, "/p", nil)
	ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
	defer cancel()
	r = r.WithContext(ctx)
	r.RemoteAddr = peer
	w := httptest.NewRecorder()
	deadline, _ := ctx.Deadline()
	l.Wrap(next).ServeHTTP(w, r)
	if early := time.Until(deadline); early > 0 {
		t.Errorf("answered %v before the context's deadline", early)
	}
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || next.calls.Load() != 0 || st.calls.Load() < 2 {
		t.Errorf("status %d, Retry-After %q, handler called %d, Admit called %d; want 503, 1, 0, at least 2",
			w.Code, w.Header().Get("Retry-After"), next.calls.Load(), st.calls.Load())
	}
	if len(got) != 1 || !errors.Is(got[0], cache.ErrContended) || !errors.Is(got[0], context.DeadlineExceeded) {
		t.Errorf("error handler got %v, want one error wrapping cache.ErrContended and context.DeadlineExceeded", got)
	}
}

// TestDynamoContention: 64 goroutines × 4 requests from one address through four FailOpen
// Limiters (four servers) over one DynamoDB table whose own retries are off, under 100 per
// hour: exactly 100 are served, the other 156 are refused with 429, the handler runs for the
// served ones only, the key counts 100, and no error is reported. Within a Limiter the
// requests take turns on the key; between the four they contend, and that is retried.
func TestDynamoContention(t *testing.T) {
	srv := dynalitetest.Start(t)
	hc := &http.Transport{MaxIdleConnsPerHost: 64}
	defer hc.CloseIdleConnections()
	c := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("dummy", "dummy", ""),
		BaseEndpoint: aws.String(srv.Endpoint), RetryMaxAttempts: 1, HTTPClient: &http.Client{Transport: hc},
	})
	ctx := context.Background()
	if err := dynamostore.CreateTable(ctx, c, "ratelimits"); err != nil {
		t.Fatal(err)
	}
	st, err := dynamostore.New(c, dynamostore.Options{Table: "ratelimits", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := must(rollingwindow.New(strategy.Rule{Limit: 100, Window: time.Hour, Granularity: time.Minute}))
	var reported atomic.Int64
	next := &counting{}
	var urls []string
	for range 4 {
		l, err := New(st, s, WithErrorPolicy(FailOpen), WithErrorHandler(func(_ *http.Request, err error) {
			if reported.Add(1) == 1 {
				t.Errorf("error reported: %v", err)
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		up := httptest.NewServer(l.Wrap(next))
		defer up.Close()
		urls = append(urls, up.URL)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for range 4 {
				resp, err := client.Get(urls[i%len(urls)] + "/")
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	snap, err := st.Peek(ctx, s, "ip:127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	// How often the four met contention (the figure varies with scheduling; 0 would mean
	// this run did not exercise the retry, which the fake store's tests above do exactly).
	t.Logf("store: %+v", st.Stats())
	if ok.Load() != 100 || refused.Load() != 156 || other.Load() != 0 || next.calls.Load() != 100 || snap.Usage[0].Used != 100 || reported.Load() != 0 {
		t.Errorf("served %d, refused %d, other %d, handler called %d, key counts %d, errors reported %d; want 100, 156, 0, 100, 100, 0",
			ok.Load(), refused.Load(), other.Load(), next.calls.Load(), snap.Usage[0].Used, reported.Load())
	}
}

package transporttest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/internal/handlertest"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestMiddlewareDynamoContentionServesExactlyLimit: 64 goroutines × 4 requests from one address
// through four Admit Limiters (four servers) over one DynamoDB table whose own retries are off,
// under 100 per hour: exactly 100 are served, the other 156 are refused with 429, the handler runs
// for the served ones only, the key counts 100, and no error is reported. Within a Limiter the
// requests take turns on the key; between the four they contend, and that is retried. (The
// middleware's TestContentionRetriedThenServedOnce and TestContentionUntilDeadlineAnswers503 check
// the retry exactly, on a memory store that loses races on purpose.)
func TestMiddlewareDynamoContentionServesExactlyLimit(t *testing.T) {
	st := dynamoStore(t, dynamostore.Options{MaxRetries: -1})
	ctx := context.Background()
	rule := strategy.Rule{Limit: 100, Window: time.Hour, Granularity: time.Minute}
	s, err := rollingwindow.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	var reported atomic.Int64
	next := &handlertest.Counting{}
	var urls []string
	var limiters []*middleware.Limiter
	for range 4 {
		l, err := middleware.New(st, s, middleware.WithOutagePolicy(middleware.Admit), middleware.WithErrorHandler(func(_ *http.Request, err error) {
			if reported.Add(1) == 1 {
				t.Errorf("error reported: %v", err)
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		limiters = append(limiters, l)
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
	snap, err := limiters[0].Status(ctx, "ip:127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	// How often the four met contention (the figure varies with scheduling; 0 would mean
	// this run did not exercise the retry, which the memory store's tests in package
	// middleware do exactly).
	t.Logf("store: %+v", st.Stats())
	if ok.Load() != 100 || refused.Load() != 156 || other.Load() != 0 || next.Calls.Load() != 100 || snap.Usage[0].Used != 100 || reported.Load() != 0 {
		t.Errorf("served %d, refused %d, other %d, handler called %d, key counts %d, errors reported %d; want 100, 156, 0, 100, 100, 0",
			ok.Load(), refused.Load(), other.Load(), next.Calls.Load(), snap.Usage[0].Used, reported.Load())
	}
}

package middleware

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// 50 goroutines × 20 requests from one address against a real server, limit 100 in a fixed
// window that cannot roll over (the clock does not move): exactly 100 admitted.
func TestConcurrentRequestsAdmitExactlyLimit(t *testing.T) {
	store, _ := newStore(t)
	l, err := New(store, must(fixedwindow.New(strategy.Rule{Limit: 100, Window: time.Minute})))
	if err != nil {
		t.Fatal(err)
	}
	next := &counting{}
	srv := httptest.NewServer(l.Wrap(next))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 50}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 20 {
				resp, err := client.Get(srv.URL + "/")
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
					if resp.Header.Get("Retry-After") == "" {
						t.Error("429 without Retry-After")
					}
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 100 || refused.Load() != 900 || other.Load() != 0 || next.Calls.Load() != 100 {
		t.Errorf("admitted %d, refused %d, other %d, next called %d; want 100, 900, 0, 100",
			ok.Load(), refused.Load(), other.Load(), next.Calls.Load())
	}
}

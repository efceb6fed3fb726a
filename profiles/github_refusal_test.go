package profiles_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestGitHubRefusalReturnsAtHeader: a 429, and a 403, with a JSON body that the server streams:
// its first bytes, then the rest only once the caller has its response (or after 30 s). The
// profile's RoundTrip returns at the header, as net/http's does: it reads nothing of a 429's
// body, and waits for a 403's at most 100 ms (githubSecondaryWait), so it returns before the
// server sends the rest. The caller still reads the whole body, every byte in order. No bound
// here depends on the machine's speed: the rest of the body waits for the caller, and only a
// RoundTrip that read the body to its end would wait the server's 30 s out.
func TestGitHubRefusalReturnsAtHeader(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusForbidden} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			release := make(chan struct{})
			var waitedOut atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				w.Write([]byte(`{"message":"`))
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-time.After(30 * time.Second):
					waitedOut.Store(true)
				case <-r.Context().Done():
				}
				w.Write([]byte(`slow"}`))
			}))
			defer srv.Close()
			tr, err := ratemonitor.New(srv.Client().Transport, profiles.GitHubREST().Options()...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/repos/o/r", nil)
			req.Header.Set("Authorization", "Bearer ghp_x")
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			took := time.Since(start)
			close(release)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != `{"message":"slow"}` {
				t.Errorf("%d: body %q (%v), want {\"message\":\"slow\"}", status, body, err)
			}
			if waitedOut.Load() {
				t.Errorf("RoundTrip of a %d returned after %v, once the server had sent the whole body: it read the body first", status, took.Round(time.Millisecond))
			}
		})
	}
}

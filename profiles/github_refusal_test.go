package profiles_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestGitHubRefusalReturnsAtHeader: a 429, and a 403, with a JSON body that the server streams
// (its first bytes, then a pause of 0.7 s): net/http's RoundTrip returns at the header, and so
// does the profile's: a 429's body is not read, a 403's is waited for 100 ms at most
// (githubSecondaryWait). The caller still reads the whole body, every byte in order.
func TestGitHubRefusalReturnsAtHeader(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusForbidden} {
		refusalReturnsAtHeader(t, status)
	}
}

func refusalReturnsAtHeader(t *testing.T, status int) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(`{"message":"`))
		w.(http.Flusher).Flush()
		select {
		case <-time.After(700 * time.Millisecond):
		case <-r.Context().Done():
		}
		w.Write([]byte(`slow"}`))
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.GitHubREST()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/repos/o/r", nil)
	req.Header.Set("Authorization", "Bearer ghp_x")
	start := time.Now()
	resp, err := tr.RoundTrip(req)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != `{"message":"slow"}` {
		t.Errorf("%d: body %q (%v), want {\"message\":\"slow\"}", status, body, err)
	}
	if took > 500*time.Millisecond {
		t.Errorf("RoundTrip of a %d returned after %v, want at the header (well under 500 ms): it read the body first", status, took.Round(time.Millisecond))
	}
}

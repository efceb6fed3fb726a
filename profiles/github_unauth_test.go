package profiles_test

import (
	"context"
	"errors"
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

// TestGitHubUnauthenticatedAllows60: GitHub allows 60 unauthenticated requests an hour; the
// profile charges ⌈5000/60⌉ = 84 points each against 5000, so only 59 fit (60 × 84 = 5040). A
// charge of ⌊5000/60⌋ = 83 fits exactly 60 (60 × 83 = 4980 ≤ 5000 < 61 × 83 = 5063), and scales
// the reported remaining exactly too (r × 83 points hold r requests). Sixty requests one after
// another, each with 1 s to go: all are sent; the 61st is refused at once (a wait of an hour
// would pass its deadline) and not sent.
func TestGitHubUnauthenticatedAllows60(t *testing.T) {
	reset := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1))
		h := w.Header()
		h.Set("x-ratelimit-limit", "60")
		h.Set("x-ratelimit-remaining", strconv.Itoa(max(0, 60-i)))
		h.Set("x-ratelimit-reset", reset)
		h.Set("x-ratelimit-resource", "core")
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.GitHubREST()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sent := 0
	for i := range 60 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/repos/o/r", nil)
		resp, err := tr.RoundTrip(req)
		cancel()
		if err != nil {
			t.Errorf("request %d of 60 unauthenticated in the hour: %v", i+1, err)
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sent++
	}
	if sent != 60 {
		t.Errorf("%d unauthenticated requests sent in the hour, want 60 (GitHub's limit)", sent)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/repos/o/r", nil)
	var de *ratemonitor.DeadlineError
	if resp, err := tr.RoundTrip(req); !errors.As(err, &de) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Errorf("61st unauthenticated request in the hour: error %v, want a *ratemonitor.DeadlineError", err)
	}
	if n.Load() != 60 {
		t.Errorf("%d requests reached GitHub, want 60", n.Load())
	}
}

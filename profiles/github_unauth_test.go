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
// another, each with 30 s to go (what a request may take on a loaded machine): all are sent; the
// 61st is refused at once (a wait of an hour would pass its deadline) and not sent.
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
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.GitHubREST().Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sent := 0
	for i := range 60 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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

// TestGitHubUnauthenticatedHeldTo60: 100 unauthenticated requests at once: 60 are sent (83 points
// each of the 5000 an hour), GitHub refuses none (it allows 60 an hour: "The primary rate limit
// for unauthenticated requests is 60 requests per hour"), the other 40 are refused at once.
func TestGitHubUnauthenticatedHeldTo60(t *testing.T) {
	reset := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	up := newBarrier(100, func(i int, w http.ResponseWriter) {
		h := w.Header()
		h.Set("x-ratelimit-limit", "60")
		h.Set("x-ratelimit-remaining", strconv.Itoa(max(0, 60-i)))
		h.Set("x-ratelimit-reset", reset)
		h.Set("x-ratelimit-resource", "core")
		if i > 60 {
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"message":"API rate limit exceeded for 127.0.0.1."}`))
			return
		}
		w.Write([]byte(`{}`))
	})
	srv := httptest.NewServer(up)
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.GitHubREST().Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	refused, sent := 0, 0
	for _, s := range fireOr(t, tr, 100, func() *http.Request { return request(srv.URL) }, true) {
		if s == http.StatusForbidden {
			refused++
		}
		if s != 0 {
			sent++
		}
	}
	if refused != 0 || sent != 60 {
		t.Errorf("GitHub refused %d of 100 unauthenticated requests sent at once, %d sent; want none refused, 60 sent (83 points each of 5000: GitHub allows 60 an hour)", refused, sent)
	}
}

package standin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// ghSend has g answer one request of method from the token tok.
func ghSend(g *GitHub, method string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, "http://api.github.test/user", nil)
	req.Header.Set("Authorization", "Bearer tok")
	g.ServeHTTP(rec, req)
	return rec
}

// TestGitHubSecondaryPointsAMinute: 900 points in any minute, a POST 5 and a GET 1 (GitHub's
// page); the first request over them is a 403 naming the secondary limit, with retry-after the
// seconds until it fits, and does not count.
func TestGitHubSecondaryPointsAMinute(t *testing.T) {
	now := t0
	g := NewGitHub(func() time.Time { return now })
	g.Secondary = true
	for i := range 170 { // 850 points at t0
		if rec := ghSend(g, http.MethodPost); rec.Code != http.StatusOK {
			t.Fatalf("POST %d at t0: %d, want 200", i+1, rec.Code)
		}
	}
	now = t0.Add(30 * time.Second)
	for i := range 50 { // 900 points
		if rec := ghSend(g, http.MethodGet); rec.Code != http.StatusOK {
			t.Fatalf("GET %d at t0+30s: %d, want 200", i+1, rec.Code)
		}
	}
	rec := ghSend(g, http.MethodGet)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "secondary rate limit") || rec.Header().Get("retry-after") != "30" {
		t.Fatalf("the 901st point: %d, retry-after %q, %s; want 403, 30 (the POSTs of t0 leave at t0+60s), the secondary message",
			rec.Code, rec.Header().Get("retry-after"), rec.Body)
	}
	if rec.Header().Get("x-ratelimit-remaining") != "" {
		t.Errorf("a secondary refusal carries x-ratelimit-remaining %q; want none", rec.Header().Get("x-ratelimit-remaining"))
	}
	now = t0.Add(time.Minute)
	if rec := ghSend(g, http.MethodPost); rec.Code != http.StatusOK {
		t.Fatalf("a POST at t0+60s, when 850 points have left: %d, want 200", rec.Code)
	}
	if p, _, f := g.SecondaryRefused(); p != 1 || f != 0 || g.Refused() != 1 {
		t.Errorf("refused: %d for points, %d in flight, %d in all; want 1, 0, 1", p, f, g.Refused())
	}
	if n, _, _ := g.Accepted(); n != 221 {
		t.Errorf("accepted %d, want 221", n)
	}
}

// TestGitHubSecondaryRetryAfterCoversTheCost: a POST refused while only a GET's point is free
// waits until 5 points are.
func TestGitHubSecondaryRetryAfterCoversTheCost(t *testing.T) {
	now := t0
	g := NewGitHub(func() time.Time { return now })
	g.Secondary = true
	for i := range 899 {
		now = t0.Add(time.Duration(i) * 10 * time.Millisecond) // the last at t0+8.98s
		ghSend(g, http.MethodGet)
	}
	now = t0.Add(20 * time.Second)
	if rec := ghSend(g, http.MethodPost); rec.Code != http.StatusForbidden || rec.Header().Get("retry-after") != "41" {
		t.Fatalf("a POST with 1 point free: %d, retry-after %q; want 403 and 41 (the 4th GET, sent at t0+30ms, leaves at t0+60.03s)", rec.Code, rec.Header().Get("retry-after"))
	}
	if rec := ghSend(g, http.MethodGet); rec.Code != http.StatusOK {
		t.Fatalf("a GET with 1 point free: %d, want 200", rec.Code)
	}
}

// TestGitHubSecondaryRequestsInProgress: the 101st request of a token while 100 are in progress
// is a 403 naming the secondary limit, without retry-after; another token's is served.
func TestGitHubSecondaryRequestsInProgress(t *testing.T) {
	gate := make(chan struct{})
	g := NewGitHub(func() time.Time { return t0 })
	g.Secondary, g.Gate = true, gate
	var wg sync.WaitGroup
	codes := make(chan int, GitHubInFlight)
	for range GitHubInFlight {
		wg.Go(func() { codes <- ghSend(g, http.MethodGet).Code })
	}
	for g.inProgress("Bearer tok") < GitHubInFlight {
		time.Sleep(time.Millisecond)
	}
	rec := ghSend(g, http.MethodGet)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "secondary rate limit") || rec.Header().Get("retry-after") != "" {
		t.Errorf("the 101st in progress: %d, retry-after %q, %s; want 403, none, the secondary message", rec.Code, rec.Header().Get("retry-after"), rec.Body)
	}
	other := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "http://api.github.test/user", nil)
	req.Header.Set("Authorization", "Bearer other")
	wg.Go(func() { g.ServeHTTP(other, req) }) // held by the gate too
	close(gate)
	wg.Wait()
	if other.Code != http.StatusOK {
		t.Errorf("another token's request while the first has 100 in progress: %d, want 200", other.Code)
	}
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("one of the first 100: %d, want 200", c)
		}
	}
	if p, _, f := g.SecondaryRefused(); p != 0 || f != 1 || g.MaxInFlight() != GitHubInFlight {
		t.Errorf("refused %d for points and %d in flight, most in flight %d; want 0, 1, 100", p, f, g.MaxInFlight())
	}
}

// TestGitHubPrimaryOnlyByDefault: without Secondary, 1000 POSTs in a second are served (the
// primary limit's tests send thousands on a manual clock).
func TestGitHubPrimaryOnlyByDefault(t *testing.T) {
	g := NewGitHub(func() time.Time { return t0 })
	for i := range 1000 {
		if rec := ghSend(g, http.MethodPost); rec.Code != http.StatusOK {
			t.Fatalf("POST %d: %d, want 200", i+1, rec.Code)
		}
	}
}

// TestGitHubContentGeneratingRequests: with Content, at most 80 writes a minute and 500 an hour
// per token (GitHub's page, "in general"); the first over is a 403 naming the secondary limit
// with retry-after the seconds until it fits, and does not count; reads are not limited by it.
func TestGitHubContentGeneratingRequests(t *testing.T) {
	now := t0
	g := NewGitHub(func() time.Time { return now })
	g.Secondary, g.Content = true, true
	for m := range 7 { // 80 POSTs a minute for 6 minutes, then 20: 500 in the hour
		now = t0.Add(time.Duration(m) * time.Minute)
		n := 80
		if m == 6 {
			n = 20
		}
		for i := range n {
			if rec := ghSend(g, http.MethodPost); rec.Code != http.StatusOK {
				t.Fatalf("POST %d of minute %d: %d, want 200", i+1, m, rec.Code)
			}
		}
		if m == 0 {
			rec := ghSend(g, http.MethodPatch)
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "secondary rate limit") || rec.Header().Get("retry-after") != "60" {
				t.Fatalf("the 81st write of a minute: %d, retry-after %q; want 403, 60", rec.Code, rec.Header().Get("retry-after"))
			}
			if rec := ghSend(g, http.MethodGet); rec.Code != http.StatusOK {
				t.Fatalf("a GET after 80 writes: %d, want 200", rec.Code)
			}
		}
	}
	now = t0.Add(10 * time.Minute)
	rec := ghSend(g, http.MethodDelete)
	if rec.Code != http.StatusForbidden || rec.Header().Get("retry-after") != "3000" {
		t.Fatalf("the 501st write of an hour: %d, retry-after %q; want 403, 3000 (the first leaves at t0+1h)", rec.Code, rec.Header().Get("retry-after"))
	}
	if p, c, f := g.SecondaryRefused(); p != 0 || c != 2 || f != 0 {
		t.Errorf("refused %d for points, %d for content, %d in flight; want 0, 2, 0", p, c, f)
	}
	if n, _, _ := g.Accepted(); n != 501 {
		t.Errorf("accepted %d, want 501 (500 writes and a GET)", n)
	}
}

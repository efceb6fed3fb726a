package headerparse

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGitHubSecondaryWithinKeepsBody: a 403 whose JSON body (there at once) names the secondary
// rate limit is one, and its body still yields every byte; a 429 with the same body gives false
// without a byte read (Refused covers it); a 403 about permissions gives false. The wait allowed is
// 30 s, far more than the peek's goroutine takes even on a loaded machine: GitHubSecondaryWithin
// returns as soon as the peek ends, and a body that is there ends it at once.
func TestGitHubSecondaryWithinKeepsBody(t *testing.T) {
	const msg = `{"message":"You have exceeded a secondary rate limit"}`
	for _, c := range []struct {
		status int
		body   string
		want   bool
	}{
		{http.StatusForbidden, msg, true},
		{http.StatusTooManyRequests, msg, false},
		{http.StatusForbidden, `{"message":"Resource not accessible by integration"}`, false},
	} {
		resp := &http.Response{StatusCode: c.status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(c.body))}
		if got := GitHubSecondaryWithin(resp, 30*time.Second); got != c.want {
			t.Errorf("%d %s: GitHubSecondaryWithin = %v, want %v", c.status, c.body, got, c.want)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || string(b) != c.body {
			t.Errorf("%d: body after the peek %q (%v), want %q", c.status, b, err, c.body)
		}
	}
}

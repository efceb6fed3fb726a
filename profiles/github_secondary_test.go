package profiles_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestGitHubRESTKeepsSecondaryPoints (not fixed; run with RATEMONITOR_BREAK_REPRO=1): GitHub
// allows a token 900 points a minute besides its 5000 requests an hour, a POST costing 5 points
// and a GET 1 (standin.GitHub with Secondary, written from GitHub's page). GitHubREST keeps only
// the hour, and a request costs the same on every rule, so 1000 requests sent one after another,
// every tenth a POST, draw 403s once 900 points are spent in the first minute. Charging each
// request on every limit in its unit (issue 27, meters) is the fix.
func TestGitHubRESTKeepsSecondaryPoints(t *testing.T) {
	if os.Getenv("RATEMONITOR_BREAK_REPRO") == "" {
		t.Skip("known defect, not fixed: set RATEMONITOR_BREAK_REPRO=1 to reproduce")
	}
	s, _ := drive(t, profiles.GitHubREST(), func(now func() time.Time) standIn {
		gh := standin.NewGitHub(now)
		gh.Secondary = true
		return gh
	}, 1000, func(i int, url string) *http.Request {
		req := request(url, "Authorization", "Bearer ghp_test")
		if i%10 == 0 {
			req.Method = http.MethodPost
		}
		return req
	})
	if n, _, _ := s.Accepted(); s.Refused() != 0 {
		t.Errorf("%d accepted, %d refused by GitHub's secondary limit; want none refused", n, s.Refused())
	}
}

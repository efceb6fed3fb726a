package cost

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
)

// githubRateLimit is the rateLimit object a GitHub GraphQL query may ask for. Source: GitHub,
// "Rate limits and query limits for the GraphQL API",
// https://docs.github.com/graphql/overview/rate-limits-and-query-limits-for-the-graphql-api:
// cost is the points the query was charged, remaining the points left in the hour, limit the
// points per hour, and resetAt (ISO 8601, UTC) when the window resets. The same page lists the
// x-ratelimit-limit, -remaining, -used and -reset (epoch seconds) fields of every response.
type githubRateLimit struct {
	Cost      *float64  `json:"cost"`
	Limit     *float64  `json:"limit"`
	Remaining *float64  `json:"remaining"`
	ResetAt   time.Time `json:"resetAt"`
}

// parseGitHubRateLimit reads data.rateLimit from a GraphQL response body; ok is false when the
// body is not JSON or the query did not ask for it.
func parseGitHubRateLimit(body []byte) (r githubRateLimit, ok bool) {
	var doc struct {
		Data struct {
			RateLimit *githubRateLimit `json:"rateLimit"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Data.RateLimit == nil {
		return githubRateLimit{}, false
	}
	return *doc.Data.RateLimit, true
}

// GitHubGraphQL returns a Reader of GitHub's GraphQL cost for a key whose rule has the given
// window (an hour at GitHub). The cost is data.rateLimit.cost when the query asked for it, and
// Unknown otherwise (the headers do not say one query's cost). The remaining points come from
// the X-RateLimit-* fields (reset in epoch seconds) when the header arrives, and from
// data.rateLimit (remaining, limit, resetAt) once the body has been read, when it has it. Of a
// body longer than MaxBody, the last "rateLimit" member in its first MaxBody or last
// 64 KiB is read. It declares that one window.
func GitHubGraphQL(window time.Duration) Declared {
	fields := headers.XRateLimitReader(window, headers.ResetEpoch)
	head := func(resp *http.Response, now time.Time) Report {
		return Report{Cost: Unknown, Signals: fields.Read(resp.Header, now).Signals}
	}
	body := func(_ *http.Response, b Body, now time.Time) Report {
		rep := Report{Cost: Unknown}
		rl, ok := githubBody(b)
		if !ok {
			return rep
		}
		rep.Cost = points(rl.Cost)
		if rem := points(rl.Remaining); rem != Unknown && rl.Remaining != nil && float64(rem) == *rl.Remaining {
			sig := headers.Signal{Window: window, Remaining: rem, Limit: points(rl.Limit), Reset: headers.Unknown}
			if !rl.ResetAt.IsZero() {
				sig.Reset = max(0, rl.ResetAt.Sub(now))
			}
			rep.Signals = []headers.Signal{sig}
		}
		return rep
	}
	return declare(fmt.Sprintf("cost.GitHubGraphQL(%v)", window), head, body, headers.Window{Window: window})
}

func githubBody(b Body) (githubRateLimit, bool) {
	if b.Whole {
		return parseGitHubRateLimit(b.Head)
	}
	var rl githubRateLimit
	if member(b.Tail, "rateLimit", &rl) || member(b.Head, "rateLimit", &rl) {
		return rl, true
	}
	return githubRateLimit{}, false
}

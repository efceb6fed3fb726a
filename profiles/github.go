package profiles

import (
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// GitHub's primary limit for requests made with a personal access token (or by an app on a
// user's behalf): 5000 an hour. Source: GitHub, "Rate limits for the REST API",
// https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api; the GraphQL
// API's is 5000 points an hour, "Rate limits and query limits for the GraphQL API",
// https://docs.github.com/graphql/overview/rate-limits-and-query-limits-for-the-graphql-api.
const GitHubHourLimit = 5000

// GitHubREST paces a GitHub REST API client: requests are keyed by their token (a digest of
// the Authorization header; an unauthenticated request by host), each held to 5000 an hour
// with a 1 s margin.
//
// It reads X-RateLimit-Limit, -Remaining and -Reset (epoch seconds) on every response. GitHub
// refuses with a 403 or a 429 (its page above): with X-RateLimit-Remaining 0 for the primary
// limit, which pauses the token until X-RateLimit-Reset; with Retry-After for a secondary
// limit, which pauses it that long; and when neither says, GitHub asks for at least a minute,
// which is the pause (SyncConfig.Fallback). Package retry retries such a 403 after the pause.
func GitHubREST() []ratemonitor.Option {
	return []ratemonitor.Option{
		ratemonitor.WithRules(strategy.Rule{Limit: GitHubHourLimit, Window: time.Hour, Margin: time.Second}),
		ratemonitor.WithKeyFunc(byCredential),
		ratemonitor.WithSync(ratemonitor.SyncConfig{
			Readers:  []headers.Reader{headers.XRateLimitReader(time.Hour, headers.ResetEpoch)},
			Fallback: time.Minute,
		}),
		ratemonitor.WithPacing(),
	}
}

// GitHubGraphQL paces a GitHub GraphQL API client in points: 5000 an hour per token, as
// GitHubREST does requests. Each query is charged estimate(req) points before it is sent (nil:
// 1, the least a query costs), and corrected to the cost GitHub reports when the query asks for
// rateLimit { cost remaining resetAt } (cost.GitHubGraphQL); the remaining points, from that
// object or else from the X-RateLimit-* fields, raise the count. An estimate below the real
// cost lets a burst overshoot until the first answers arrive: ask for rateLimit, and estimate
// from it.
func GitHubGraphQL(estimate func(*http.Request) int) []ratemonitor.Option {
	opts := GitHubREST()
	opts = append(opts, ratemonitor.WithCostReport(cost.GitHubGraphQL(time.Hour)))
	if estimate != nil {
		opts = append(opts, ratemonitor.WithCost(estimate))
	}
	return opts
}

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
const githubHourLimit = 5000

// githubUnauthenticatedHourLimit is GitHub's primary limit for unauthenticated REST requests:
// 60 an hour per IP address (the REST page above: "The primary rate limit for unauthenticated
// requests is 60 requests per hour").
const githubUnauthenticatedHourLimit = 60

// GitHub's secondary limits kept here, per token (the REST page above, "About secondary rate
// limits"): at most 100 requests in progress at once; at most 900 points a minute for the REST
// API and 2000 for the GraphQL API, a GET, HEAD or OPTIONS request (or a GraphQL query)
// costing 1 point and a POST, PATCH, PUT or DELETE (or a GraphQL mutation) 5; and in general
// at most 80 content-generating requests a minute and 500 an hour, every write counted as one
// (the page does not list them).
const (
	githubInFlight            = 100
	githubMinutePoints        = 900
	githubGraphQLMinutePoints = 2000
	githubContentMinute       = 80
	githubContentHour         = 500
)

// githubSecondaryWait bounds how long RoundTrip waits for a 403's body to say whether it is a
// secondary rate limit (headerparse.GitHubSecondaryWithin): GitHub's error documents are small and
// come with the header; a body slower than this is not waited for.
const githubSecondaryWait = 100 * time.Millisecond

// githubMaxPause is the longest pause the GitHub profiles take (SyncConfig.MaxPause): GitHub's
// limits reset within the hour, so a reset or Retry-After further away (a garbled value) is
// cut to an hour and a minute.
const githubMaxPause = time.Hour + time.Minute

// githubUnauthenticatedCost is what an unauthenticated request is charged against the 5000 an
// hour rule: ⌊5000 / 60⌋ = 83, so that exactly GitHub's 60 fit in an hour (60 × 83 = 4980 ≤
// 5000 < 61 × 83 = 5063). The figures of its responses are scaled by the same factor (r
// requests remaining: r × 83 points, which hold exactly r requests).
const githubUnauthenticatedCost = githubHourLimit / githubUnauthenticatedHourLimit

// GitHubREST paces a GitHub REST API client: each token (a keyed hash of the Authorization
// header, under "github-rest:") is held to 5000 requests an hour with a 1 s margin, to 900
// points a minute (meter "points": a GET, HEAD or OPTIONS 1 point, a POST, PATCH, PUT or DELETE
// 5), to 80 writes a minute and 500 an hour (meter "content") and to 100 requests in progress.
// Unauthenticated requests are keyed by host under
// "github-rest-unauthenticated:" and charged 83 each, so that at most 60 go in an hour. It reads
// X-RateLimit-Limit, -Remaining and -Reset of the core resource, and pauses the token on
// GitHub's 403 and 429 refusals, for at most 1 h 1 min. Source: GitHub, "Rate limits for
// the REST API". See docs/profiles.md#github-rest.
func GitHubREST() Profile {
	return Profile{
		Name:  "profiles.GitHubREST",
		Key:   githubKey("github-rest"),
		Rules: []strategy.Rule{{Limit: githubHourLimit, Window: time.Hour, Margin: time.Second}},
		Cost: func(req *http.Request) int {
			if req.Header.Get("Authorization") == "" {
				return githubUnauthenticatedCost
			}
			return 1
		},
		CostReport: githubReader{resource: "core", name: "profiles.GitHubREST"},
		Meters: []ratemonitor.Meter{{Name: "points",
			Rules: []strategy.Rule{{Limit: githubMinutePoints, Window: time.Minute, Margin: time.Second}},
			Cost:  githubRESTPoints}, githubContent(githubRESTPoints)},
		InFlight: githubInFlight,
		Sync:     githubSync(),
		Pacing:   true,
	}
}

// GitHubGraphQL paces a GitHub GraphQL API client in points: 5000 an hour per token, as
// GitHubREST does requests, on keys of their own ("github-graphql:"): GitHub counts GraphQL
// points apart from REST requests, so the two profiles can share a store. GitHub's secondary
// limits are held too: 2000 points a minute (a query 1, a mutation 5, read from a copy of the
// body; 5 when there is none), 80 mutations a minute and 500 an hour, and 100 requests in
// progress. Each query is
// charged estimate(req) points before it is sent (nil: 1, the least a query costs), and
// corrected to the cost GitHub reports when the query asks for rateLimit { cost remaining
// resetAt } (cost.GitHubGraphQL), once the caller has read the response body to its end; the
// remaining points, from the X-RateLimit-* fields of responses whose X-RateLimit-Resource is
// graphql (or absent) and from that object, raise the count. An estimate below the real cost
// lets a burst overshoot until the first answers arrive: ask for rateLimit, and estimate from
// it. Refusals are read as GitHubREST reads them.
func GitHubGraphQL(estimate func(*http.Request) int) Profile {
	r := githubReader{resource: "graphql", name: "profiles.GitHubGraphQL", body: cost.GitHubGraphQL(time.Hour), hasBody: true}
	return Profile{
		Name:       "profiles.GitHubGraphQL",
		Key:        githubKey("github-graphql"),
		Rules:      []strategy.Rule{{Limit: githubHourLimit, Window: time.Hour, Margin: time.Second}},
		Cost:       estimate,
		CostReport: githubBodyReader{r},
		Meters: []ratemonitor.Meter{{Name: "points",
			Rules: []strategy.Rule{{Limit: githubGraphQLMinutePoints, Window: time.Minute, Margin: time.Second}},
			Cost:  githubGraphQLPoints}, githubContent(githubGraphQLPoints)},
		InFlight: githubInFlight,
		Sync:     githubSync(),
		Pacing:   true,
	}
}

// githubContent is the meter of GitHub's content-generating requests, 80 a minute and 500 an
// hour per token: a request counts 1 when points says it writes (5 points), and is not charged
// otherwise.
func githubContent(points func(*http.Request) int) ratemonitor.Meter {
	return ratemonitor.Meter{Name: "content",
		Rules: []strategy.Rule{{Limit: githubContentMinute, Window: time.Minute, Margin: time.Second},
			{Limit: githubContentHour, Window: time.Hour, Margin: time.Second}},
		Cost: func(req *http.Request) int {
			if points(req) == githubWritePoints {
				return 1
			}
			return 0
		}}
}

// githubSync is the GitHub profiles' WithSync: the figures come from the profile's cost
// reader (githubReader), which sees the request; the pauses from the refusals.
func githubSync() *ratemonitor.SyncConfig {
	return &ratemonitor.SyncConfig{
		Readers:  []headers.Reader{},
		Fallback: time.Minute,
		MaxPause: githubMaxPause,
	}
}

// githubKey keys a request by its token under prefix (byCredential), and an unauthenticated
// one by host under prefix + "-unauthenticated:", a limit of its own.
func githubKey(prefix string) ratemonitor.KeyFunc {
	return func(req *http.Request) string {
		if req.Header.Get("Authorization") == "" {
			return prefix + "-unauthenticated:" + ratemonitor.KeyByHost(req)
		}
		return prefix + ":" + byCredential(req)
	}
}

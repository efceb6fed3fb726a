package standin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GitHub stands in for the GitHub REST API's primary limit: per token (the Authorization
// header) a quota of Limit requests that resets an hour after the first (docs.github.com, "Rate
// limits for the REST API"). Every answer carries x-ratelimit-limit, -remaining, -used, -reset
// (epoch seconds) and -resource: core; a request over the quota is a 403 with
// x-ratelimit-remaining 0 and a JSON message, as GitHub answers its primary limit.
//
// With Secondary set it also keeps the secondary limits that page lists, per token: at most
// 100 requests in progress (shared with GraphQL there; this stand-in serves REST only), and at
// most 900 points a minute, a GET, HEAD or OPTIONS costing 1 point and a POST, PATCH, PUT or
// DELETE 5. The page does not say how the minute is aligned: it is a rolling one here, the
// strictest reading. Over either, GitHub answers 403 or 429 with a message naming the secondary
// rate limit: here a 403 with that message and, for the points, retry-after (whole seconds
// until the points fit); for the requests in progress, no field, so that a client waits the
// page's "at least one minute". A refused request does not count. Service is how long each
// accepted request stays in progress (real time), so that concurrent callers overlap; a test
// that must know they overlap sets Gate instead, which holds each until it is closed.
//
// With Content set it keeps, per token, the page's limit of content-generating requests too: in
// general at most 80 a minute and 500 an hour. The page does not list which requests generate
// content: every write (POST, PATCH, PUT, DELETE; a GraphQL mutation) counts here, the
// strictest reading, in rolling windows; over either, the same 403 with retry-after.
//
// With GraphQL set it stands in for the GraphQL API instead ("Rate limits and query limits for
// the GraphQL API", docs.github.com): each request costs 1 point of the hour (the least a query
// costs there), its fields name the graphql resource, and the secondary limit is 2000 points a
// minute, a query costing 1 and a mutation 5 (the REST page's table).
type GitHub struct {
	Now       func() time.Time
	Limit     int
	Secondary bool
	Content   bool
	GraphQL   bool
	Service   time.Duration
	Gate      <-chan struct{}
	Counts

	mu       sync.Mutex
	tokens   map[string]*ghWindow
	inFlight map[string]int
	most     int
	// the refusals of each secondary limit
	pointsRefused, contentRefused, inFlightRefused int
}

// GitHub's secondary limits for REST (the page cited on GitHub).
const (
	GitHubInFlight     = 100
	GitHubMinutePoints = 900
	GitHubReadPoints   = 1 // GET, HEAD, OPTIONS
	GitHubWritePoints  = 5 // POST, PATCH, PUT, DELETE
	// GitHubGraphQLMinutePoints is the GraphQL API's secondary limit of points a minute.
	GitHubGraphQLMinutePoints = 2000
	// GitHubContentMinute and GitHubContentHour are the content-generating requests allowed.
	GitHubContentMinute = 80
	GitHubContentHour   = 500
	githubSecondaryBody = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`
)

// GitHubPoints is what a request of method costs on GitHub's secondary limit of points.
func GitHubPoints(method string) int {
	switch method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		return GitHubWritePoints
	}
	return GitHubReadPoints
}

// MaxInFlight returns the most requests of one token that were in progress at once.
func (g *GitHub) MaxInFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most
}

// inProgress returns the requests of token in progress now.
func (g *GitHub) inProgress(token string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight[token]
}

// SecondaryRefused returns the requests refused for the points a minute, for the
// content-generating requests, and for the requests in progress.
func (g *GitHub) SecondaryRefused() (points, content, inFlight int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pointsRefused, g.contentRefused, g.inFlightRefused
}

type ghWindow struct {
	reset   time.Time
	used    int
	points  []ghPoints  // the last minute's accepted requests, oldest first
	content []time.Time // the last hour's accepted content-generating requests, oldest first
}

// contentWait drops the content-generating requests older than an hour at now and returns 0
// when one more fits 80 a minute and 500 an hour, or how long until it does.
func (win *ghWindow) contentWait(now time.Time) time.Duration {
	i := 0
	for i < len(win.content) && !now.Before(win.content[i].Add(time.Hour)) {
		i++
	}
	win.content = win.content[i:]
	var wait time.Duration
	if n := len(win.content); n >= GitHubContentHour {
		wait = win.content[n-GitHubContentHour].Add(time.Hour).Sub(now)
	}
	if n := len(win.content); n >= GitHubContentMinute {
		if at := win.content[n-GitHubContentMinute].Add(time.Minute); now.Before(at) {
			wait = max(wait, at.Sub(now))
		}
	}
	return wait
}

type ghPoints struct {
	at time.Time
	n  int
}

// minutePoints drops the points older than a minute at now and returns those left, and when
// the oldest of them leaves.
func (win *ghWindow) minutePoints(now time.Time) (int, time.Time) {
	i := 0
	for i < len(win.points) && !now.Before(win.points[i].at.Add(time.Minute)) {
		i++
	}
	win.points = win.points[i:]
	sum := 0
	for _, p := range win.points {
		sum += p.n
	}
	if len(win.points) == 0 {
		return 0, now
	}
	return sum, win.points[0].at.Add(time.Minute)
}

// NewGitHub returns a GitHub stand-in of 5000 an hour reading instants from now.
func NewGitHub(now func() time.Time) *GitHub {
	return &GitHub{Now: now, Limit: 5000, tokens: map[string]*ghWindow{}}
}

// Use counts n requests of token made by another client, as if sent now.
func (g *GitHub) Use(token string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.window(token, g.Now()).used += n
}

func (g *GitHub) window(token string, now time.Time) *ghWindow {
	win := g.tokens[token]
	if win == nil || !now.Before(win.reset) {
		// Reset is whole epoch seconds: the window ends at the second it names.
		win = &ghWindow{reset: now.Add(time.Hour).Truncate(time.Second)}
		if old := g.tokens[token]; old != nil {
			win.points, win.content = old.points, old.content // they outlive the hour's reset
		}
		g.tokens[token] = win
	}
	return win
}

func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := r.Header.Get("Authorization")
	g.mu.Lock()
	if g.inFlight == nil {
		g.inFlight = map[string]int{}
	}
	if g.Secondary && g.inFlight[token] >= GitHubInFlight {
		g.inFlightRefused++
		g.mu.Unlock()
		g.refuse()
		g.secondary(w, g.Now(), 0)
		return
	}
	g.inFlight[token]++
	g.most = max(g.most, g.inFlight[token])
	accepted := g.serve(w, r, token)
	g.mu.Unlock()
	if accepted { // outside the lock: the request stays in progress meanwhile
		time.Sleep(g.Service)
		if g.Gate != nil {
			<-g.Gate
		}
	}
	g.mu.Lock()
	g.inFlight[token]--
	g.mu.Unlock()
}

// serve answers r under g.mu, and reports whether it was accepted.
func (g *GitHub) serve(w http.ResponseWriter, r *http.Request, token string) bool {
	now := g.Now()
	win := g.window(token, now)
	cost, limit, resource := GitHubPoints(r.Method), GitHubMinutePoints, "core"
	if g.GraphQL {
		cost, limit, resource = graphQLPoints(r), GitHubGraphQLMinutePoints, "graphql"
	}
	if g.Secondary {
		if used, free := win.minutePoints(now); used+cost > limit {
			for _, p := range win.points {
				if used+cost-p.n <= limit {
					free = p.at.Add(time.Minute)
					break
				}
				used -= p.n
			}
			g.pointsRefused++
			g.refuse()
			g.secondary(w, now, free.Sub(now))
			return false
		}
	}
	write := cost == GitHubWritePoints
	if g.Content && write {
		if wait := win.contentWait(now); wait > 0 {
			g.contentRefused++
			g.refuse()
			g.secondary(w, now, wait)
			return false
		}
	}
	date(w, now)
	ok := win.used < g.Limit
	if ok {
		win.used++
	}
	h := w.Header()
	h.Set("x-ratelimit-limit", strconv.Itoa(g.Limit))
	h.Set("x-ratelimit-remaining", strconv.Itoa(max(0, g.Limit-win.used)))
	h.Set("x-ratelimit-used", strconv.Itoa(win.used))
	h.Set("x-ratelimit-reset", strconv.FormatInt(win.reset.Unix(), 10))
	h.Set("x-ratelimit-resource", resource)
	h.Set("Content-Type", "application/json; charset=utf-8")
	if !ok {
		g.refuse()
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`))
		return false
	}
	win.points = append(win.points, ghPoints{at: now, n: cost})
	if write {
		win.content = append(win.content, now)
	}
	g.accept(now)
	w.Write([]byte(`{"login":"octocat"}`))
	return true
}

// secondary answers a secondary-limit refusal: a 403 with GitHub's message, and retry-after
// when wait is positive.
func (g *GitHub) secondary(w http.ResponseWriter, now time.Time, wait time.Duration) {
	date(w, now)
	h := w.Header()
	if wait > 0 {
		h.Set("retry-after", strconv.FormatInt(seconds(wait), 10))
	}
	h.Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	w.Write([]byte(githubSecondaryBody))
}

// graphQLPoints reads r's GraphQL request and returns 5 for a mutation, 1 for a query: the
// operation's keyword, the first word of the document ("query" may be left out).
func graphQLPoints(r *http.Request) int {
	var req struct {
		Query string `json:"query"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return GitHubWritePoints
	}
	if f := strings.Fields(req.Query); len(f) > 0 && strings.HasPrefix(f[0], "mutation") {
		return GitHubWritePoints
	}
	return GitHubReadPoints
}

package standin

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// GitHub stands in for the GitHub REST API's primary limit: per token (the Authorization
// header) a quota of Limit requests that resets an hour after the first (docs.github.com, "Rate
// limits for the REST API"). Every answer carries x-ratelimit-limit, -remaining, -used, -reset
// (epoch seconds) and -resource: core; a request over the quota is a 403 with
// x-ratelimit-remaining 0 and a JSON message, as GitHub answers its primary limit.
type GitHub struct {
	Now   func() time.Time
	Limit int
	Counts

	mu     sync.Mutex
	tokens map[string]*ghWindow
}

type ghWindow struct {
	reset time.Time
	used  int
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
		g.tokens[token] = win
	}
	return win
}

func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.Now()
	date(w, now)
	win := g.window(r.Header.Get("Authorization"), now)
	ok := win.used < g.Limit
	if ok {
		win.used++
	}
	h := w.Header()
	h.Set("x-ratelimit-limit", strconv.Itoa(g.Limit))
	h.Set("x-ratelimit-remaining", strconv.Itoa(max(0, g.Limit-win.used)))
	h.Set("x-ratelimit-used", strconv.Itoa(win.used))
	h.Set("x-ratelimit-reset", strconv.FormatInt(win.reset.Unix(), 10))
	h.Set("x-ratelimit-resource", "core")
	h.Set("Content-Type", "application/json; charset=utf-8")
	if !ok {
		g.refuse()
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`))
		return
	}
	g.accept(now)
	w.Write([]byte(`{"login":"octocat"}`))
}

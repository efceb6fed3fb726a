package standin

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// HubSpot stands in for the HubSpot API of a private app on a Free or Starter account: per
// token (the Authorization header) 100 requests in a rolling 10 s and 250 000 a day
// (developers.hubspot.com/docs/developer-tooling/platform/usage-guidelines). Every answer carries
// X-HubSpot-RateLimit-Max, -Remaining, -Interval-Milliseconds, -Daily and -Daily-Remaining; a
// refusal is a 429 with HubSpot's JSON error (errorType RATE_LIMIT, policyName) and no
// Retry-After.
type HubSpot struct {
	Now func() time.Time
	Counts

	mu     sync.Mutex
	tokens map[string]*[2]rolling
}

// NewHubSpot returns a HubSpot stand-in reading instants from now.
func NewHubSpot(now func() time.Time) *HubSpot {
	return &HubSpot{Now: now, tokens: map[string]*[2]rolling{}}
}

func (s *HubSpot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	date(w, now)
	tok := r.Header.Get("Authorization")
	l := s.tokens[tok]
	if l == nil {
		l = &[2]rolling{{limit: 100, w: 10 * time.Second}, {limit: 250_000, w: 24 * time.Hour}}
		s.tokens[tok] = l
	}
	policy := ""
	if ok, _ := l[0].room(now); !ok {
		policy = "TEN_SECONDLY_ROLLING"
	} else if ok, _ := l[1].room(now); !ok {
		policy = "DAILY"
	}
	if policy == "" {
		l[0].add(now)
		l[1].add(now)
	}
	h := w.Header()
	h.Set("X-HubSpot-RateLimit-Max", "100")
	h.Set("X-HubSpot-RateLimit-Remaining", strconv.Itoa(l[0].remaining(now)))
	h.Set("X-HubSpot-RateLimit-Interval-Milliseconds", "10000")
	h.Set("X-HubSpot-RateLimit-Daily", "250000")
	h.Set("X-HubSpot-RateLimit-Daily-Remaining", strconv.Itoa(l[1].remaining(now)))
	h.Set("Content-Type", "application/json;charset=utf-8")
	if policy != "" {
		s.refuse()
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"status":"error","message":"You have reached your ten_secondly_rolling limit.","errorType":"RATE_LIMIT","correlationId":"00000000-0000-0000-0000-000000000000","policyName":"` + policy + `"}`))
		return
	}
	s.accept(now)
	w.Write([]byte(`{"results":[]}`))
}

// Use counts n requests of token made by another client, as if made now.
func (s *HubSpot) Use(token string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	l := s.tokens[token]
	if l == nil {
		l = &[2]rolling{{limit: 100, w: 10 * time.Second}, {limit: 250_000, w: 24 * time.Hour}}
		s.tokens[token] = l
	}
	for range n {
		l[0].add(now)
		l[1].add(now)
	}
}

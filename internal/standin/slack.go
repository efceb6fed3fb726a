package standin

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Slack stands in for Slack's Web API methods of one tier: per method and token (the URL path
// and the Authorization header) PerMinute calls in a rolling minute
// (docs.slack.dev/apis/web-api/rate-limits). A refusal is a 429 with Retry-After (seconds) and
// {"ok":false,"error":"ratelimited"}.
type Slack struct {
	Now       func() time.Time
	PerMinute int
	Counts

	mu   sync.Mutex
	keys map[string]*rolling
}

// NewSlack returns a Slack stand-in of perMinute calls a minute per method, reading instants
// from now.
func NewSlack(now func() time.Time, perMinute int) *Slack {
	return &Slack{Now: now, PerMinute: perMinute, keys: map[string]*rolling{}}
}

func (s *Slack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	date(w, now)
	k := r.Header.Get("Authorization") + " " + r.URL.Path
	l := s.keys[k]
	if l == nil {
		l = &rolling{limit: s.PerMinute, w: time.Minute}
		s.keys[k] = l
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if ok, d := l.room(now); !ok {
		s.refuse()
		w.Header().Set("Retry-After", strconv.FormatInt(seconds(d), 10))
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"ok":false,"error":"ratelimited"}`))
		return
	}
	l.add(now)
	s.accept(now)
	w.Write([]byte(`{"ok":true}`))
}

// Use counts n calls of method (a URL path) with token made by another client, as if made now.
func (s *Slack) Use(token, method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := token + " " + method
	l := s.keys[k]
	if l == nil {
		l = &rolling{limit: s.PerMinute, w: time.Minute}
		s.keys[k] = l
	}
	for range n {
		l.add(s.Now())
	}
}

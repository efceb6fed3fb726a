package standin

import (
	"net/http"
	"sync"
	"time"
)

// Stripe stands in for the Stripe API in live mode: per secret key (the Authorization header)
// 100 operations in any second (docs.stripe.com/rate-limits). A refusal is a 429 with Stripe's
// JSON error (type invalid_request_error, code rate_limit) and no rate-limit header fields.
type Stripe struct {
	Now func() time.Time
	Counts

	mu   sync.Mutex
	keys map[string]*rolling
}

// NewStripe returns a Stripe stand-in reading instants from now.
func NewStripe(now func() time.Time) *Stripe {
	return &Stripe{Now: now, keys: map[string]*rolling{}}
}

func (s *Stripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	date(w, now)
	k := r.Header.Get("Authorization")
	l := s.keys[k]
	if l == nil {
		l = &rolling{limit: 100, w: time.Second}
		s.keys[k] = l
	}
	w.Header().Set("Content-Type", "application/json")
	if ok, _ := l.room(now); !ok {
		s.refuse()
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error":{"code":"rate_limit","message":"Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.","type":"invalid_request_error"}}`))
		return
	}
	l.add(now)
	s.accept(now)
	w.Write([]byte(`{"object":"balance"}`))
}

// Use counts n requests of key made by another client, as if made now.
func (s *Stripe) Use(key string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.keys[key]
	if l == nil {
		l = &rolling{limit: 100, w: time.Second}
		s.keys[key] = l
	}
	for range n {
		l.add(s.Now())
	}
}

package standin

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// bucket is a leaky bucket: level drains at rate a second, never below 0.
type bucket struct {
	size  float64
	rate  float64
	level float64
	at    time.Time
}

func (b *bucket) drain(now time.Time) {
	if !b.at.IsZero() && now.After(b.at) {
		b.level = max(0, b.level-b.rate*now.Sub(b.at).Seconds())
	}
	if now.After(b.at) {
		b.at = now
	}
}

// ShopifyREST stands in for Shopify's REST Admin API on the Standard plan: per store (the
// request's host) a leaky bucket of 40 requests draining at 2 a second
// (shopify.dev/docs/api/admin-rest/usage/rate-limits). Every answer carries
// X-Shopify-Shop-Api-Call-Limit ("32/40"); a request that finds the bucket full is a 429 with
// Retry-After: 2.0 and {"errors":"Exceeded 2 calls per second for api client. Reduce request
// rates to resume uninterrupted service."}.
type ShopifyREST struct {
	Now func() time.Time
	Counts

	mu     sync.Mutex
	stores map[string]*bucket
}

// NewShopifyREST returns a Shopify REST stand-in reading instants from now.
func NewShopifyREST(now func() time.Time) *ShopifyREST {
	return &ShopifyREST{Now: now, stores: map[string]*bucket{}}
}

func (s *ShopifyREST) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	date(w, now)
	b := s.stores[r.Host]
	if b == nil {
		b = &bucket{size: 40, rate: 2}
		s.stores[r.Host] = b
	}
	b.drain(now)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	if b.level+1 > b.size+1e-9 {
		s.refuse()
		h.Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", int(b.size), int(b.size)))
		h.Set("Retry-After", "2.0")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"errors":"Exceeded 2 calls per second for api client. Reduce request rates to resume uninterrupted service."}`))
		return
	}
	b.level++
	h.Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", int(b.level+0.999999), int(b.size)))
	s.accept(now)
	w.Write([]byte(`{"shop":{"name":"stand-in"}}`))
}

// Use puts n requests of another client in host's bucket, as if made now.
func (s *ShopifyREST) Use(host string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.stores[host]
	if b == nil {
		b = &bucket{size: 40, rate: 2}
		s.stores[host] = b
	}
	b.drain(s.Now())
	b.level = min(b.size, b.level+float64(n))
}

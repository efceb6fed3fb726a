package middleware

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// BenchmarkWrap measures the middleware's own cost per admitted request over the memory store:
// key from the peer address, one Admit, the two RateLimit fields.
func BenchmarkWrap(b *testing.B) {
	st, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s, err := fixedwindow.New(strategy.Rule{Limit: 1 << 30, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(st, s)
	if err != nil {
		b.Fatal(err)
	}
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/ping", nil)
	req.RemoteAddr = "192.0.2.7:51234"
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.Header())
		h.ServeHTTP(w, req)
	}
	if w.Code != http.StatusOK {
		b.Fatalf("status %d", w.Code)
	}
}

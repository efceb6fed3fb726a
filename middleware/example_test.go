package middleware_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func Example() {
	store, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	s, err := fixedwindow.New(strategy.Rule{Limit: 60, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	l, err := middleware.New(store, s,
		middleware.WithKeyHeader("X-Client-Key"), // else the client's address
		middleware.WithTrustedProxies("X-Forwarded-For", "10.0.0.0/8"),
		middleware.WithIPv6Prefix(64))
	if err != nil {
		log.Fatal(err)
	}
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") }))

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	// Output: 200 "60-per-60s";q=60;w=60
}

package docs

import (
	"context"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func serve(ctx context.Context, ping http.Handler) error {
	s, err := fixedwindow.New(strategy.Rule{Limit: 60, Window: time.Minute})
	if err != nil {
		return err
	}
	st, err := sqlitestore.Open(ctx, "limits.db", sqlitestore.Options{}) // or cache.NewMemory, redisstore.New
	if err != nil {
		return err
	}
	defer st.Close()
	lim, err := middleware.New(st, s,
		middleware.WithKeyHeader("X-Client-Key"),                       // else the peer address
		middleware.WithTrustedProxies("X-Forwarded-For", "10.0.0.0/8"), // only these proxies are believed
	)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ping", lim.Wrap(ping))
	return http.ListenAndServe("127.0.0.1:8080", mux)
}

package docs

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/metrics"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func prometheusMetrics(api http.Handler) error {
	s, err := fixedwindow.New(strategy.Rule{Limit: 100, Window: time.Minute})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	obs, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		return err
	}
	store, err := cache.NewMemory(cache.MemoryConfig{Observer: obs})
	if err != nil {
		return err
	}
	defer store.Close()
	limiter, err := middleware.New(store, s, middleware.WithObserver(obs))
	if err != nil {
		return err
	}
	http.Handle("/api/", limiter.Wrap(api))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return nil
}

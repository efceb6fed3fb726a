package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/metrics"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

const defaultWindow = time.Minute

type config struct {
	addr, strategy, store, db, redis, keyHeader, trusted string
	dynamoEndpoint, dynamoTable                          string
	limit, metricsKeys                                   int
	window, granularity                                  time.Duration
}

// check refuses settings that cannot work, saying what to change.
func (c config) check() error {
	if c.metricsKeys < 0 {
		return fmt.Errorf("-metrics-keys %d: want 0 (no key label) or more", c.metricsKeys)
	}
	switch c.store {
	case "memory", "sqlite", "redis":
	case "dynamodb":
		if c.dynamoEndpoint == "" {
			return errors.New("-store dynamodb needs -dynamodb-endpoint, the API's URL (e.g. http://127.0.0.1:8000 for dynalite)")
		}
		if c.dynamoTable == "" {
			return errors.New("-dynamodb-table is empty")
		}
	default:
		return fmt.Errorf("-store %q: want memory, sqlite, redis or dynamodb", c.store)
	}
	if c.db == "" {
		return errors.New("-db is empty: the api_calls audit table needs a SQLite file")
	}
	if c.keyHeader == "" {
		return errors.New("-key-header is empty: name the header that identifies a client, e.g. X-Client-Key")
	}
	if c.granularity != 0 && c.strategy != "rollingwindow" {
		return fmt.Errorf("-granularity applies to -strategy rollingwindow only, not %s", c.strategy)
	}
	for _, p := range c.proxies() {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				return fmt.Errorf("-trusted-proxies: %q is neither an address nor a CIDR range", p)
			}
		}
	}
	_, err := c.rules()
	return err
}

// proxies returns the trusted proxies, trimmed.
func (c config) proxies() []string {
	if strings.TrimSpace(c.trusted) == "" {
		return nil
	}
	ps := strings.Split(c.trusted, ",")
	for i := range ps {
		ps[i] = strings.TrimSpace(ps[i])
	}
	return ps
}

// maxDefaultBuckets is the most buckets past the first that -granularity 0 keeps per key: a
// window the library's default granularity would cut finer gets window/maxDefaultBuckets.
const maxDefaultBuckets = 1000

// rules returns the strategy the flags describe.
func (c config) rules() (*engine.Strategy, error) {
	r := strategy.Rule{Limit: c.limit, Window: c.window}
	switch {
	case c.strategy != "rollingwindow":
		// The fixed window and the token bucket take any window.
	case c.granularity != 0:
		r.Granularity = c.granularity
	case r.Window/r.Bucket() > maxDefaultBuckets && c.window%maxDefaultBuckets == 0:
		// The library's default (Granularity 0, Rule.Bucket) keeps most windows in 61 buckets,
		// but a window with no whole-second divisor near a sixtieth of itself in 1 s buckets:
		// over 10 000 of them for a long one, more than the Redis store's script walks
		// (redisstore.MaxBuckets). Such a window gets 1001 instead.
		r.Granularity = c.window / maxDefaultBuckets
	}
	var s *engine.Strategy
	var err error
	switch c.strategy {
	case "fixedwindow":
		s, err = fixedwindow.New(r)
	case "rollingwindow":
		s, err = rollingwindow.New(r)
	case "tokenbucket":
		s, err = tokenbucket.New(r)
	default:
		return nil, fmt.Errorf("-strategy %q: want fixedwindow, rollingwindow or tokenbucket", c.strategy)
	}
	if err != nil {
		return nil, fmt.Errorf("-limit %d -window %v: %w", c.limit, c.window, err)
	}
	return s, nil
}

// server is the demo service: the limiter, its store, and the audit table.
type server struct {
	cfg     config
	log     *slog.Logger
	store   cache.Store
	limiter *middleware.Limiter
	audit   *sql.DB
	closers []func() error
	ln      net.Listener
	http    *http.Server
}

func newServer(ctx context.Context, cfg config, log *slog.Logger) (_ *server, err error) {
	s, _ := cfg.rules() // checked by parseFlags
	srv := &server{cfg: cfg, log: log}
	// /metrics: the observer gets the store's and the middleware's events.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := metrics.New(reg, metrics.Options{MaxKeys: cfg.metricsKeys})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			srv.Close()
		}
	}()
	var sq *sqlitestore.Store
	open := func() error {
		sq, err = sqlitestore.Open(ctx, cfg.db, sqlitestore.Options{
			OnError:  func(err error) { log.Warn("sqlite store", "err", err) },
			Observer: obs,
		})
		if err != nil {
			return fmt.Errorf("-db %s: %w", cfg.db, err)
		}
		srv.closers = append(srv.closers, sq.Close)
		return nil
	}
	if err := open(); err != nil {
		return nil, err
	}
	srv.audit = sq.DB()
	if _, err := srv.audit.ExecContext(ctx, auditSchema); err != nil {
		return nil, fmt.Errorf("create the api_calls table in %s: %w", cfg.db, err)
	}
	switch cfg.store {
	case "memory":
		m, err := cache.NewMemory(cache.MemoryConfig{Logger: log, Observer: obs})
		if err != nil {
			return nil, err
		}
		srv.store = m
		srv.closers = append(srv.closers, m.Close)
	case "sqlite":
		srv.store = sq
	case "redis":
		// The store refuses a client that retries: a script that may have run is never replayed.
		client := redis.NewClient(&redis.Options{Addr: cfg.redis, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
		srv.closers = append(srv.closers, client.Close)
		if err := client.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("-store redis: cannot reach Redis at %s: %w", cfg.redis, err)
		}
		rs, err := redisstore.New(client, redisstore.Options{Observer: obs})
		if err != nil {
			return nil, err
		}
		srv.store = rs
	case "dynamodb":
		if srv.store, err = openDynamo(ctx, cfg, obs); err != nil {
			return nil, err
		}
		srv.closers = append(srv.closers, srv.store.Close)
	}
	opts := []middleware.Option{
		middleware.WithKeyHeader(cfg.keyHeader),
		middleware.WithObserver(obs),
		middleware.WithErrorHandler(func(r *http.Request, err error) {
			log.Error("rate limiter", "path", r.URL.Path, "err", err)
		}),
	}
	if ps := cfg.proxies(); ps != nil {
		opts = append(opts, middleware.WithTrustedProxies("X-Forwarded-For", ps...))
	}
	// New refuses, e.g., a strategy the store cannot hold: the error names the flags at fault.
	if srv.limiter, err = middleware.New(srv.store, s, opts...); err != nil {
		return nil, fmt.Errorf("-store %s -strategy %s: %w", cfg.store, cfg.strategy, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ping", srv.limiter.Wrap(http.HandlerFunc(srv.ping)))
	mux.HandleFunc("GET /status", srv.status)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if srv.ln, err = net.Listen("tcp", cfg.addr); err != nil {
		return nil, fmt.Errorf("-addr %s: %w", cfg.addr, err)
	}
	return srv, nil
}

// Serve serves until ctx is done, then lets requests under way finish (up to 10 s).
func (srv *server) Serve(ctx context.Context) error {
	srv.log.Info("listening", "url", "http://"+srv.ln.Addr().String(), "strategy", srv.cfg.strategy,
		"store", srv.cfg.store, "rule", fmt.Sprintf("%d/%v", srv.cfg.limit, srv.cfg.window))
	errc := make(chan error, 1)
	go func() { errc <- srv.http.Serve(srv.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.http.Shutdown(sctx)
	<-errc
	srv.log.Info("stopped")
	return err
}

// Close releases the listener, stores and database, in the reverse order of opening.
func (srv *server) Close() error {
	var errs []error
	if srv.ln != nil {
		srv.ln.Close()
	}
	for i := len(srv.closers) - 1; i >= 0; i-- {
		errs = append(errs, srv.closers[i]())
	}
	srv.closers = nil
	return errors.Join(errs...)
}

func (srv *server) ping(w http.ResponseWriter, r *http.Request) {
	a, _ := middleware.FromContext(r.Context())
	if err := srv.record(r.Context(), a.Key, r); err != nil {
		srv.log.Error("audit", "err", err)
		http.Error(w, "the call was admitted but could not be audited", http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "pong"})
}

// statusBody is GET /status's answer.
type statusBody struct {
	Key      string `json:"key"`
	Strategy string `json:"strategy"`
	// RetryAfter is how long until one more call would be admitted, in whole seconds rounded
	// up, as a 429's Retry-After would say; 0 when one would be admitted now.
	RetryAfter int64        `json:"retry_after_seconds"`
	Rules      []ruleStatus `json:"rules"`
}

type ruleStatus struct {
	Rule          string  `json:"rule"`
	Limit         int     `json:"limit"`
	WindowSeconds float64 `json:"window_seconds"`
	Used          int     `json:"used"`
	Remaining     int     `json:"remaining"`
}

func (srv *server) status(w http.ResponseWriter, r *http.Request) {
	key := srv.limiter.HeaderKey(r.URL.Query().Get("key"))
	if !r.URL.Query().Has("key") {
		var err error
		if key, err = srv.limiter.Key(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	} else if r.URL.Query().Get("key") == "" {
		http.Error(w, "key= is empty: give the X-Client-Key value to look up, or leave key out for your own", http.StatusBadRequest)
		return
	}
	snap, err := srv.limiter.Status(r.Context(), key)
	if err != nil {
		srv.log.Error("status", "key", key, "err", err)
		http.Error(w, "the rate-limit store is unavailable", http.StatusServiceUnavailable)
		return
	}
	body := statusBody{Key: key, Strategy: srv.cfg.strategy, RetryAfter: int64((snap.Wait + time.Second - 1) / time.Second)}
	for _, u := range snap.Usage {
		body.Rules = append(body.Rules, ruleStatus{Rule: fmt.Sprintf("%d/%v", u.Rule.Limit, u.Rule.Window),
			Limit: u.Rule.EffectiveLimit(), WindowSeconds: u.Rule.EffectiveWindow().Seconds(), Used: u.Used, Remaining: u.Remaining})
	}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// openDynamo opens the DynamoDB store, creating its table when it does not exist.
func openDynamo(ctx context.Context, cfg config, obs *metrics.Observer) (*dynamostore.Store, error) {
	st, err := dynamostore.OpenOrCreate(ctx, dynamostore.EndpointClient(cfg.dynamoEndpoint), dynamostore.Options{Table: cfg.dynamoTable, Observer: obs})
	if err != nil {
		return nil, fmt.Errorf("-dynamodb-endpoint %s -dynamodb-table %s: %w", cfg.dynamoEndpoint, cfg.dynamoTable, err)
	}
	return st, nil
}

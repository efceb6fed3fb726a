package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// store is an open store, its name for output (no password), and what closes it.
type store struct {
	cache.Store
	name  string
	close func()
}

// openStore opens cfg.store, checks that it can hold cfg.strat (a usage error otherwise) and
// that it answers (a runtime error otherwise).
func openStore(ctx context.Context, cfg *config) (*store, error) {
	u, err := url.Parse(cfg.store)
	if err != nil || u.Scheme == "" {
		return nil, usagef("--store %q: want redis://host:port, sqlite:///path.db or dynamodb+http(s)://endpoint?table=T", cfg.store)
	}
	if cfg.prefix != "" && u.Scheme != "redis" {
		return nil, usagef("--prefix applies to the Redis store only")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	var st *store
	switch u.Scheme {
	case "redis":
		st, err = openRedis(ctx, cfg, u)
	case "sqlite":
		st, err = openSQLite(ctx, cfg, u)
	case "dynamodb+http", "dynamodb+https":
		st, err = openDynamo(ctx, cfg, u)
	default:
		return nil, usagef("--store %s: unknown scheme %q: want redis, sqlite, dynamodb+http or dynamodb+https", u.Redacted(), u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	var validate func(*engine.Strategy) error
	if d, ok := st.Store.(cache.Describer); ok {
		validate = d.Describe().Validate
	}
	if validate != nil {
		if err := validate(cfg.strat); err != nil {
			st.close()
			return nil, usagef("--store %s cannot hold these rules under %s: %v", st.name, cfg.strat.Name(), err)
		}
	}
	return st, nil
}

// quiet drops go-redis's own log lines (a refused dial is logged besides being returned);
// the command reports every error itself.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func openRedis(ctx context.Context, cfg *config, u *url.URL) (*store, error) {
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, usagef("--store %s: %v", u.Redacted(), err)
	}
	// What the store requires: never replay a script, honour deadlines, and report a refused
	// connection at once.
	opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DialerRetries = -1, true, 1
	redis.SetLogger(quiet{})
	rc := redis.NewClient(opts)
	name := u.Redacted()
	if err := rc.Ping(ctx).Err(); err != nil {
		rc.Close()
		return nil, fmt.Errorf("--store %s: Redis does not answer: %w", name, err)
	}
	st, err := redisstore.New(rc, redisstore.Options{Prefix: cfg.prefix, Timeout: cfg.timeout})
	if err != nil {
		rc.Close()
		return nil, usagef("--store %s: %v", name, err)
	}
	return &store{Store: st, name: name, close: func() { st.Close(); rc.Close() }}, nil
}

func openSQLite(ctx context.Context, cfg *config, u *url.URL) (*store, error) {
	// sqlite:///abs/path.db → /abs/path.db; sqlite://rel/path.db → rel/path.db.
	path := strings.TrimPrefix(cfg.store, "sqlite://")
	if path == cfg.store || path == "" || u.RawQuery != "" {
		return nil, usagef("--store %s: want sqlite:///path/to/file.db", cfg.store)
	}
	// Open creates a missing file; an inspection tool must not.
	if fi, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("--store %s: %w", cfg.store, err)
	} else if fi.IsDir() {
		return nil, fmt.Errorf("--store %s: %s is a directory", cfg.store, path)
	}
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{PruneEvery: -1})
	if err != nil {
		return nil, fmt.Errorf("--store %s: %w", cfg.store, err)
	}
	return &store{Store: st, name: cfg.store, close: func() { st.Close() }}, nil
}

func openDynamo(ctx context.Context, cfg *config, u *url.URL) (*store, error) {
	table := u.Query().Get("table")
	if table == "" {
		return nil, usagef("--store %s: name the table, e.g. ?table=ratemonitor", u.Redacted())
	}
	if u.Host == "" {
		return nil, usagef("--store %s: want dynamodb+http://host:port?table=T", u.Redacted())
	}
	endpoint := strings.TrimPrefix(u.Scheme, "dynamodb+") + "://" + u.Host + u.Path
	st, err := dynamostore.New(dynamostore.EndpointClient(endpoint), dynamostore.Options{Table: table})
	if err != nil {
		return nil, usagef("--store %s: %v", u.Redacted(), err)
	}
	if err := st.Check(ctx); err != nil {
		st.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", cfg.timeout, err)
		}
		return nil, fmt.Errorf("--store %s: %w", u.Redacted(), err)
	}
	return &store{Store: st, name: u.Redacted(), close: func() { st.Close() }}, nil
}

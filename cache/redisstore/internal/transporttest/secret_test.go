package transporttest

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestNoCredentialLeaksRedis sends requests carrying a bearer token (and, in some URLs, the
// token as a query parameter) through the failure paths a Transport has over the Redis store
// (a pause, a skewed Date, a deadline, Redis down under fail closed, degraded and fail open),
// and checks that the token appears in no error, log line, observer event (the store's
// included), or key or value written to Redis, while the hashed key does reach Redis. The
// core's TestNoCredentialLeaks does the same over the memory store.
func TestNoCredentialLeaksRedis(t *testing.T) {
	up := leakcheck.Upstream(t)
	ctx := context.Background()
	w := &leakcheck.Watch{}
	common := func(opts ...ratemonitor.Option) []ratemonitor.Option {
		return append([]ratemonitor.Option{ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)),
			ratemonitor.WithLogger(w.Logger()), ratemonitor.WithObserver(w), ratemonitor.WithErrorHandler(w.OnError)}, opts...)
	}
	withToken := up.URL + "/skewed?access_token=" + leakcheck.Token

	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{Observer: w, Prefix: "leak"})
	app := ratemonitor.WithAppRules("app", strategy.Rule{Limit: 100, Window: time.Minute})
	rules := ratemonitor.WithRules(minute, strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute})
	tr := newTransport(t, nil, common(rules, ratemonitor.WithStore(store), ratemonitor.WithPacing(), app)...)
	monitor := newTransport(t, nil, common(rules, ratemonitor.WithStore(store), ratemonitor.WithSync(ratemonitor.SyncConfig{}), app)...)
	if err := leakcheck.Send(ctx, w, tr, up.URL+"/ok"); err != nil {
		t.Fatal(err)
	}
	// Monitoring: no wait for the pauses these ask for.
	for _, path := range []string{"/limited", "/skewed?access_token=" + leakcheck.Token} {
		if err := leakcheck.Send(ctx, w, monitor, up.URL+path); err != nil {
			t.Fatal(err)
		}
	}
	// Paced into the pause: refused at once, past the deadline.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := leakcheck.Send(short, w, tr, up.URL+"/ok"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("paced into a pause: %v, want DeadlineExceeded", err)
	}
	keys := redisContents(t, srv.Client())
	if !strings.Contains(keys, "{k"+base64.RawURLEncoding.EncodeToString([]byte(leakcheck.HashedBearer))+"}") {
		t.Errorf("the hashed key is not among the Redis keys:\n%s", keys)
	}
	if leakcheck.Leaks(keys) {
		t.Errorf("the credential is in Redis:\n%s", keys)
	}
	// Redis down: degraded mode, and fail closed.
	srv.Stop()
	closed := newTransport(t, nil, common(ratemonitor.WithRules(minute), ratemonitor.WithStore(store), ratemonitor.WithPacing(),
		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing))...)
	var se *ratemonitor.StoreError
	if err := leakcheck.Send(ctx, w, closed, up.URL+"/ok"); !errors.As(err, &se) || se.Key != leakcheck.HashedBearer {
		t.Errorf("Redis down, fail closed: %v, want a StoreError on %s", err, leakcheck.HashedBearer)
	}
	down, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	leakcheck.Send(down, w, tr, withToken) // degrades, and the hold-back passes the deadline
	open := newTransport(t, nil, common(ratemonitor.WithRules(minute), ratemonitor.WithStore(store),
		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted), ratemonitor.WithSync(ratemonitor.SyncConfig{}))...)
	leakcheck.Send(down, w, open, withToken)

	all := w.Check(t)
	// The paths above did reach the places they test.
	for _, want := range []string{"key=" + leakcheck.HashedBearer, "not sent", "past the context's deadline", "could not store what the upstream said",
		"the upstream's Date", "degraded", "skewed_date", "paused", "too_many_requests", "access_token=xxxxx", "store_error"} {
		if !strings.Contains(all, want) {
			t.Errorf("nothing logged or observed contains %q: a path was not reached", want)
		}
	}
}

// redisContents returns every key in Redis and, for strings and hashes, what they hold.
func redisContents(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "\n")
		switch c.Type(ctx, k).Val() {
		case "string":
			b.WriteString("  " + c.Get(ctx, k).Val() + "\n")
		case "hash":
			for f, v := range c.HGetAll(ctx, k).Val() {
				b.WriteString("  " + f + "=" + v + "\n")
			}
		}
		// The store's reversible encoding of the key, decoded: "<prefix>:{k<base64url>}:...".
		if _, rest, ok := strings.Cut(k, "{k"); ok {
			if enc, _, ok := strings.Cut(rest, "}"); ok {
				if dec, err := base64.RawURLEncoding.DecodeString(enc); err == nil {
					b.WriteString("  decoded key: " + string(dec) + "\n")
				}
			}
		}
	}
	return b.String()
}

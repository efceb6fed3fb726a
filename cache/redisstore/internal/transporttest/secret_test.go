package transporttest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// The credential every request of these tests carries, in its Authorization header and, for
// some, in its URL's query.
const (
	secretToken = "s3cr3tTOKEN42"
	bearer      = "Bearer " + secretToken
)

// hashedBearer is the key KeyByHeader("Authorization", nil) gives bearer: the documented
// construction computed outside Go (printf %s "Bearer s3cr3tTOKEN42" | openssl dgst -sha256
// -hmac "<DefaultKeySecret>", its first 32 hexadecimal digits).
const hashedBearer = "hmac:dbfc2dad875aa255a85a76865e814fb0"

// leakWatch collects every place a credential could surface: log lines, observer events,
// errors returned and errors handed to the error handler.
type leakWatch struct {
	mu   sync.Mutex
	logs bytes.Buffer
	seen []string
}

func (w *leakWatch) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Write takes the log's lines.
func (w *leakWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.Write(p)
}

func (w *leakWatch) Observe(e observe.Event) {
	s := e.String() + fmt.Sprintf(" %+v", e)
	if e.Err != nil {
		s += " " + e.Err.Error()
	}
	w.add(s)
}

func (w *leakWatch) add(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, s)
}

func (w *leakWatch) err(err error) {
	if err != nil {
		w.add(fmt.Sprintf("%v %+v %#v", err, err, err))
	}
}

func (w *leakWatch) onError(_ *http.Request, key string, err error) { w.add(key); w.err(err) }

// check fails t when the credential appears anywhere w saw, and returns all w saw.
func (w *leakWatch) check(t *testing.T) string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	all := w.logs.String() + "\n" + strings.Join(w.seen, "\n")
	if leaks(all) {
		t.Errorf("the credential appears in what was logged, observed or returned:\n%s", all)
	}
	return all
}

// leaks reports whether s holds the token, raw or in a reversible encoding (hexadecimal,
// base64) of the token or of the whole header value.
func leaks(s string) bool {
	low := strings.ToLower(s)
	for _, v := range []string{secretToken, bearer} {
		b := []byte(v)
		if strings.Contains(s, v) || strings.Contains(low, hex.EncodeToString(b)) {
			return true
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if strings.Contains(s, enc.EncodeToString(b)) {
				return true
			}
		}
	}
	return false
}

// secretUpstream answers /ok with 200, /limited with 429 and Retry-After: 5, and /skewed with
// that 429 dated 1970 (a skewed Date, which the Transport logs).
func secretUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/limited":
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/skewed":
			w.Header().Set("Date", "Thu, 01 Jan 1970 00:00:00 GMT")
			w.Header().Set("Retry-After", "Thu, 01 Jan 1970 00:00:05 GMT")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// sendSecret sends one request carrying the credential to url (path and query included) and
// reports the error, if any, to w.
func sendSecret(ctx context.Context, w *leakWatch, tr http.RoundTripper, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", bearer)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	w.err(err)
	return err
}

// TestNoCredentialLeaksRedis sends requests carrying a bearer token (and, in some URLs, the
// token as a query parameter) through the failure paths a Transport has over the Redis store
// (a pause, a skewed Date, a deadline, Redis down under fail closed, degraded and fail open),
// and checks that the token appears in no error, log line, observer event (the store's
// included), or key or value written to Redis, while the hashed key does reach Redis. The
// core's TestNoCredentialLeaks does the same over the memory store.
func TestNoCredentialLeaksRedis(t *testing.T) {
	up := secretUpstream(t)
	ctx := context.Background()
	w := &leakWatch{}
	common := func(opts ...ratemonitor.Option) []ratemonitor.Option {
		return append([]ratemonitor.Option{ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)),
			ratemonitor.WithLogger(w.logger()), ratemonitor.WithObserver(w), ratemonitor.WithErrorHandler(w.onError)}, opts...)
	}
	withToken := up.URL + "/skewed?access_token=" + secretToken

	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{Observer: w, Prefix: "leak"})
	app := ratemonitor.WithAppRules("app", strategy.Rule{Limit: 100, Window: time.Minute})
	rules := ratemonitor.WithRules(minute, strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute})
	tr := newTransport(t, nil, common(rules, ratemonitor.WithStore(store), ratemonitor.WithPacing(), app)...)
	monitor := newTransport(t, nil, common(rules, ratemonitor.WithStore(store), ratemonitor.WithSync(ratemonitor.SyncConfig{}), app)...)
	if err := sendSecret(ctx, w, tr, up.URL+"/ok"); err != nil {
		t.Fatal(err)
	}
	// Monitoring: no wait for the pauses these ask for.
	for _, path := range []string{"/limited", "/skewed?access_token=" + secretToken} {
		if err := sendSecret(ctx, w, monitor, up.URL+path); err != nil {
			t.Fatal(err)
		}
	}
	// Paced into the pause: refused at once, past the deadline.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := sendSecret(short, w, tr, up.URL+"/ok"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("paced into a pause: %v, want DeadlineExceeded", err)
	}
	keys := redisContents(t, srv.Client())
	if !strings.Contains(keys, "{k"+base64.RawURLEncoding.EncodeToString([]byte(hashedBearer))+"}") {
		t.Errorf("the hashed key is not among the Redis keys:\n%s", keys)
	}
	if leaks(keys) {
		t.Errorf("the credential is in Redis:\n%s", keys)
	}
	// Redis down: degraded mode, and fail closed.
	srv.Stop()
	closed := newTransport(t, nil, common(ratemonitor.WithRules(minute), ratemonitor.WithStore(store), ratemonitor.WithPacing(),
		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing))...)
	var se *ratemonitor.StoreError
	if err := sendSecret(ctx, w, closed, up.URL+"/ok"); !errors.As(err, &se) || se.Key != hashedBearer {
		t.Errorf("Redis down, fail closed: %v, want a StoreError on %s", err, hashedBearer)
	}
	down, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	sendSecret(down, w, tr, withToken) // degrades, and the hold-back passes the deadline
	open := newTransport(t, nil, common(ratemonitor.WithRules(minute), ratemonitor.WithStore(store),
		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted), ratemonitor.WithSync(ratemonitor.SyncConfig{}))...)
	sendSecret(down, w, open, withToken)

	all := w.check(t)
	// The paths above did reach the places they test.
	for _, want := range []string{"key=" + hashedBearer, "not sent", "past the context's deadline", "could not store what the upstream said",
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

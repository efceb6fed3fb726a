package ratemonitor

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

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
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
	logs bytes.Buffer
	mu   sync.Mutex
	seen []string
}

func (w *leakWatch) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: &w.logs, mu: &w.mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
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

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
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

func TestKeyByHeaderHashesCredentials(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	req.Header.Set("Authorization", bearer)
	req.Header.Set("Xero-Tenant-Id", "tenant-1")
	if got := KeyByHeader("authorization", nil)(req); got != hashedBearer {
		t.Errorf("KeyByHeader(Authorization) = %q, want %q", got, hashedBearer)
	}
	if got := HashedKey(nil, bearer); got != hashedBearer {
		t.Errorf("HashedKey = %q, want %q", got, hashedBearer)
	}
	if got := KeyByHeader("Xero-Tenant-Id", nil)(req); got != "tenant-1" {
		t.Errorf("KeyByHeader(Xero-Tenant-Id) = %q: a tenant id is no credential", got)
	}
	// With a secret of the fleet's own: printf %s tenant-1 | openssl dgst -sha256 -hmac fleet-secret.
	const fleet = "hmac:183c8653470463c5484d02477c7ea967"
	secret := []byte("fleet-secret")
	byTenant := KeyByHashedHeader("Xero-Tenant-Id", secret, nil)
	secret[0] = 'X' // the secret was copied
	if got := byTenant(req); got != fleet {
		t.Errorf("KeyByHashedHeader = %q, want %q", got, fleet)
	}
	if got := HashKey(KeyByHeader("Xero-Tenant-Id", nil), []byte("fleet-secret"))(req); got != fleet {
		t.Errorf("HashKey = %q, want %q", got, fleet)
	}
	// Fallbacks: KeyByHeader's is not hashed, HashKey hashes whatever it wraps.
	bare, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	if got := KeyByHeader("Authorization", nil)(bare); got != "api.test" {
		t.Errorf("no Authorization: %q, want the host", got)
	}
	if got := HashKey(nil, nil)(bare); got != HashedKey(nil, "api.test") || !strings.HasPrefix(got, HashedKeyPrefix) || len(got) != len(HashedKeyPrefix)+32 {
		t.Errorf("HashKey(nil, nil) = %q", got)
	}
}

// TestNoCredentialLeaks sends requests carrying a bearer token (and, in some URLs, the token as
// a query parameter) through every failure path a Transport has, over the memory store, and
// checks that the token appears in no error, log line or observer event. The stores' own cases
// are TestNoCredentialLeaksRedis (cache/redisstore/internal/transporttest) and
// TestTransportNoCredentialLeaksSQLite (cache/sqlitestore/internal/transporttest).
func TestNoCredentialLeaks(t *testing.T) {
	up := secretUpstream(t)
	ctx := context.Background()
	w := &leakWatch{}
	byAuth := WithKeyFunc(KeyByHeader("Authorization", nil))
	common := func(opts ...Option) []Option {
		return append([]Option{byAuth, WithLogger(w.logger()), WithObserver(w), WithErrorHandler(w.onError)}, opts...)
	}
	withToken := up.URL + "/skewed?access_token=" + secretToken

	t.Run("memory store closed", func(t *testing.T) {
		closed, _ := cache.NewMemory(cache.MemoryConfig{Observer: w})
		closed.Close()
		for _, p := range []StoreErrorPolicy{SendUncounted, SendNothing, Degrade} {
			tr := newTransport(t, nil, common(WithRules(minute), WithStore(closed), WithStoreErrorPolicy(p), WithSync(SyncConfig{}))...)
			paced := newTransport(t, nil, common(WithRules(minute), WithStore(closed), WithStoreErrorPolicy(p), WithPacing())...)
			sendSecret(ctx, w, tr, withToken) // record fails; under SendUncounted the 429 then fails to sync
			sendSecret(ctx, w, paced, withToken)
			_, err := paced.Reserve(ctx, paced.Key(authRequest(up.URL)), 1)
			w.err(err)
		}
	})

	t.Run("memory store: deadline, burst, pause, skew", func(t *testing.T) {
		clk := clock.NewManual(t0)
		tr := newTransport(t, nil, common(WithRules(strategy.Rule{Limit: 1, Window: time.Minute}), WithPacing(), WithClock(clk),
			WithSync(SyncConfig{}))...)
		if err := sendSecret(ctx, w, tr, withToken); err != nil { // granted; the 429 dated 1970 pauses the key and is logged
			t.Fatal(err)
		}
		dl, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var de *DeadlineError
		if err := sendSecret(dl, w, tr, up.URL+"/ok?token="+secretToken); !errors.As(err, &de) || de.Key != hashedBearer {
			t.Errorf("past the deadline: %v, want a DeadlineError on %s", err, hashedBearer)
		}
		key := tr.Key(authRequest(up.URL))
		_, err := tr.Reserve(ctx, key, 2)
		w.err(err)
		_, err = tr.WaitTime(ctx, key, 2)
		w.err(err)
		w.err(tr.Wait(dl, key, 1))
		st, err := tr.Status(ctx, key)
		w.err(err)
		w.add(fmt.Sprintf("%+v", st))
	})

	all := w.check(t)
	// The paths above did reach the places they test.
	for _, want := range []string{"key=" + hashedBearer, "not sent", "past the context's deadline", "could not store what the upstream said",
		"the upstream's Date", "degraded", "skewed_date", "paused", "too_many_requests", "access_token=xxxxx", "store_error"} {
		if !strings.Contains(all, want) {
			t.Errorf("nothing logged or observed contains %q: a path was not reached", want)
		}
	}
}

func authRequest(url string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", bearer)
	return req
}

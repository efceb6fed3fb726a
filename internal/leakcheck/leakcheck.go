// Package leakcheck is the support of the credential-leak tests: those of the core, of the
// middleware and of the stores' modules (which reach it through the core's path prefix). It
// holds the credential they send, watchers that collect every place it could surface, an
// upstream that takes a Transport through the paths it logs, and Leaks, which finds the
// credential raw or in a reversible encoding. One copy, so that every store's test looks for
// the same encodings and the same credential.
//
// It imports no package of the core that imports the root package, so that the root's own
// (internal) tests can use it.
package leakcheck

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ratemonitor/ratemonitor/observe"
)

// The credential every request of the leak tests carries, in its Authorization header and, for
// some, in its URL's query.
const (
	Token  = "s3cr3tTOKEN42"
	Bearer = "Bearer " + Token
)

// HashedBearer is the key ratemonitor.KeyByHeader("Authorization", nil) gives Bearer: the
// documented construction computed outside Go (printf %s "Bearer s3cr3tTOKEN42" | openssl dgst
// -sha256 -hmac "<DefaultKeySecret>", its first 32 hexadecimal digits).
const HashedBearer = "hmac:dbfc2dad875aa255a85a76865e814fb0"

// MiddlewareKey is the key a middleware Limiter keyed by the Authorization header gives
// Bearer: HashedBearer after the middleware's "key:".
const MiddlewareKey = "key:" + HashedBearer

// Leaks reports whether s holds the token, raw or in a reversible encoding (hexadecimal,
// base64) of the token or of the whole header value.
func Leaks(s string) bool {
	low := strings.ToLower(s)
	for _, v := range []string{Token, Bearer} {
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

// Watch collects every place a credential could surface from a Transport: log lines
// (Logger), observer events (it is an observe.Observer), errors returned (Err) and errors
// handed to the error handler (OnError). Its zero value is ready; it is safe for concurrent
// use.
type Watch struct {
	mu   sync.Mutex
	logs bytes.Buffer
	seen []string
}

// Logger returns a logger, at debug level, whose lines w keeps.
func (w *Watch) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{w}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logWriter takes the log's lines into its Watch, under the Watch's lock (the logger writes
// from the Transport's goroutines).
type logWriter struct{ w *Watch }

func (l logWriter) Write(p []byte) (int, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.logs.Write(p)
}

// Logs returns the lines logged so far.
func (w *Watch) Logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

// Observe keeps the event as its String, its fields and its error's text.
func (w *Watch) Observe(e observe.Event) {
	s := e.String() + fmt.Sprintf(" %+v", e)
	if e.Err != nil {
		s += " " + e.Err.Error()
	}
	w.Add(s)
}

// Add keeps s.
func (w *Watch) Add(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, s)
}

// Err keeps err, if not nil, in each of the forms a program may print it in (%v, %+v, %#v).
func (w *Watch) Err(err error) {
	if err != nil {
		w.Add(fmt.Sprintf("%v %+v %#v", err, err, err))
	}
}

// OnError is a Transport's error handler (ratemonitor.WithErrorHandler): it keeps the key and
// the error.
func (w *Watch) OnError(_ *http.Request, key string, err error) { w.Add(key); w.Err(err) }

// Check fails t when the credential appears anywhere w saw, and returns all w saw: the log,
// then each thing kept, a line each.
func (w *Watch) Check(t testing.TB) string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	all := w.logs.String() + "\n" + strings.Join(w.seen, "\n")
	if Leaks(all) {
		t.Errorf("the credential appears in what was logged, observed or returned:\n%s", all)
	}
	return all
}

// Upstream answers /ok (and any other path) with 200, /limited with 429 and Retry-After: 5,
// and /skewed with that 429 dated 1970 (a skewed Date, which the Transport logs). It is
// closed when the test ends.
func Upstream(t testing.TB) *httptest.Server {
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

// Send sends one GET carrying the credential in its Authorization header through tr to url
// (path and query included), closes the response's body, and reports the error, if any, to w
// before returning it.
func Send(ctx context.Context, w *Watch, tr http.RoundTripper, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		w.Err(err)
		return err
	}
	req.Header.Set("Authorization", Bearer)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	w.Err(err)
	return err
}

// Seen collects what a middleware Limiter's observer and error handler received. Its zero
// value is ready; it is safe for concurrent use.
type Seen struct {
	mu  sync.Mutex
	all []string
}

// Observe keeps the event as its String and its fields.
func (s *Seen) Observe(e observe.Event) { s.Add(fmt.Sprintf("%s %+v", e, e)) }

// OnError is a Limiter's error handler (middleware.WithErrorHandler): it keeps the error's
// text.
func (s *Seen) OnError(_ *http.Request, err error) { s.Add(err.Error()) }

// Add keeps v.
func (s *Seen) Add(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, v)
}

// String is all s kept, a line each.
func (s *Seen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.all, "\n")
}

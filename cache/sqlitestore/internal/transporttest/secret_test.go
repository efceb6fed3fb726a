package transporttest

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
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The credential every request of these tests carries, in its Authorization header.
const (
	secretToken = "s3cr3tTOKEN42"
	bearer      = "Bearer " + secretToken
)

// hashedBearer is the key ratemonitor.KeyByHeader("Authorization", nil) gives bearer: the
// documented construction computed outside Go (printf %s "Bearer s3cr3tTOKEN42" | openssl dgst
// -sha256 -hmac "<DefaultKeySecret>", its first 32 hexadecimal digits). The middleware's key
// is it after "key:".
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

// sendSecret sends one request carrying the credential to url and reports the error, if any,
// to w.
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

// storedKeys returns every key in the SQLite store's two tables, each after its table's name.
func storedKeys(t *testing.T, st *sqlitestore.Store) string {
	t.Helper()
	var keys []string
	for _, table := range []string{"rate_limit_state", "rate_limit_windows"} {
		rows, err := st.DB().QueryContext(context.Background(), "SELECT key FROM "+table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, table+": "+k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return strings.Join(keys, "\n")
}

// TestTransportNoCredentialLeaksSQLite: Transports keyed by the Authorization header (a
// rolling window, paced, and a fixed window, monitoring) send a request carrying a bearer
// token over the SQLite store, then one more each with the store closed: the hashed key is in
// each of SQLite's two tables once, and the token is in no key stored, error, log line or
// observer event, while the grants, records and store errors do name the hashed key (the
// SQLite part of the core's TestNoCredentialLeaks).
func TestTransportNoCredentialLeaksSQLite(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	ctx := context.Background()
	w := &leakWatch{}
	st := openSQLite(t, sqlitestore.Options{Observer: w})
	fixed, err := fixedwindow.New(minute)
	if err != nil {
		t.Fatal(err)
	}
	newTr := func(opts ...ratemonitor.Option) *ratemonitor.Transport {
		tr, err := ratemonitor.New(nil, append([]ratemonitor.Option{ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)),
			ratemonitor.WithLogger(w.logger()), ratemonitor.WithObserver(w), ratemonitor.WithErrorHandler(w.onError),
			ratemonitor.WithStore(st)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	rolling := newTr(ratemonitor.WithRules(minute), ratemonitor.WithPacing())
	fixedTr := newTr(ratemonitor.WithStrategy(fixed))
	for _, tr := range []*ratemonitor.Transport{rolling, fixedTr} {
		if err := sendSecret(ctx, w, tr, up.URL+"/ok"); err != nil {
			t.Fatal(err)
		}
	}
	all := storedKeys(t, st)
	if strings.Count(all, hashedBearer) != 2 || leaks(all) {
		t.Errorf("SQLite keys, want the hashed key once in each table and no credential:\n%s", all)
	}
	st.Close()
	sendSecret(ctx, w, fixedTr, up.URL+"/ok") // the store is closed now: SendUncounted sends and reports
	sendSecret(ctx, w, rolling, up.URL+"/ok") // Degrade: paced on memory, the outage logged

	seen := w.check(t)
	// The paths above did reach the places they test, under the hashed key.
	for _, want := range []string{"granted key=" + hashedBearer, "recorded key=" + hashedBearer, "key=" + hashedBearer + " request=",
		"store_error store=sqlite op=record key=" + hashedBearer, "store_error store=sqlite op=reserve key=" + hashedBearer,
		"sent anyway (send uncounted)", `not sent: recording the request under key "` + hashedBearer + `"`} {
		if !strings.Contains(seen, want) {
			t.Errorf("nothing logged or observed contains %q: a path was not reached\n%s", want, seen)
		}
	}
}

// middlewareWatch collects what the middleware's observer and error handler received.
type middlewareWatch struct {
	mu  sync.Mutex
	all []string
}

func (s *middlewareWatch) Observe(e observe.Event) { s.add(fmt.Sprintf("%s %+v", e, e)) }
func (s *middlewareWatch) onError(_ *http.Request, err error) {
	s.add(err.Error())
}
func (s *middlewareWatch) add(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, v)
}
func (s *middlewareWatch) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.all, "\n")
}

// TestMiddlewareNoCredentialLeaksSQLite: Limiters keyed by Authorization over the SQLite store,
// with a rolling and a fixed window of 1 a minute, admit (200) and refuse (429) a request
// carrying a bearer token each, and answer 503 once the store is closed; the handler sees the
// hashed key as Admission.Key, the hashed key is in each of SQLite's two tables once, and the
// token is in no stored key, response, event or error (the SQLite part of the middleware's
// TestNoCredentialLeaks).
func TestMiddlewareNoCredentialLeaksSQLite(t *testing.T) {
	const mwKey = "key:" + hashedBearer
	rolling := must(rollingwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	fixed := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	sq := openSQLite(t, sqlitestore.Options{})
	got := &middlewareWatch{}
	var handled []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := middleware.FromContext(r.Context())
		handled = append(handled, a.Key)
	})
	run := func(s *engine.Strategy, codes ...int) {
		l, err := middleware.New(sq, s, middleware.WithKeyHeader("Authorization"), middleware.WithObserver(got), middleware.WithErrorHandler(got.onError))
		if err != nil {
			t.Fatal(err)
		}
		if k := l.HeaderKey(bearer); k != mwKey {
			t.Errorf("HeaderKey = %q, want %q", k, mwKey)
		}
		h := l.Wrap(handler)
		for _, want := range codes {
			w := serve(h, "/x", "192.0.2.1:1", map[string]string{"Authorization": bearer})
			got.add(fmt.Sprintf("%d %v %s", w.Code, w.Header(), w.Body))
			if w.Code != want {
				t.Errorf("status %d, want %d", w.Code, want)
			}
		}
	}
	ok, refused, down := http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable
	run(rolling, ok, refused)
	run(fixed, ok, refused)
	if len(handled) != 2 || handled[0] != mwKey || handled[1] != mwKey {
		t.Errorf("Admission.Key %q, want %q twice", handled, mwKey)
	}
	all := storedKeys(t, sq)
	if strings.Count(all, mwKey) != 2 || leaks(all) {
		t.Errorf("stored keys, want the hashed key in both SQLite tables, and no token:\n%s", all)
	}
	sq.Close()
	run(fixed, down)
	out := got.String()
	if leaks(out) {
		t.Errorf("the token appears in what was observed, handled or answered:\n%s", out)
	}
	for _, want := range []string{"admitted key=" + mwKey, "rejected key=" + mwKey, "503", "429"} {
		if !strings.Contains(out, want) {
			t.Errorf("nothing observed or answered contains %q: a path was not reached\n%s", want, out)
		}
	}
}

package transporttest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

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
	w := &leakcheck.Watch{}
	st := openSQLite(t, sqlitestore.Options{Observer: w})
	fixed, err := fixedwindow.New(minute)
	if err != nil {
		t.Fatal(err)
	}
	newTr := func(opts ...ratemonitor.Option) *ratemonitor.Transport {
		tr, err := ratemonitor.New(nil, append([]ratemonitor.Option{ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)),
			ratemonitor.WithLogger(w.Logger()), ratemonitor.WithObserver(w), ratemonitor.WithErrorHandler(w.OnError),
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
		if err := leakcheck.Send(ctx, w, tr, up.URL+"/ok"); err != nil {
			t.Fatal(err)
		}
	}
	all := storedKeys(t, st)
	if strings.Count(all, leakcheck.HashedBearer) != 2 || leakcheck.Leaks(all) {
		t.Errorf("SQLite keys, want the hashed key once in each table and no credential:\n%s", all)
	}
	st.Close()
	leakcheck.Send(ctx, w, fixedTr, up.URL+"/ok") // the store is closed now: SendUncounted sends and reports
	leakcheck.Send(ctx, w, rolling, up.URL+"/ok") // Degrade: paced on memory, the outage logged

	seen := w.Check(t)
	// The paths above did reach the places they test, under the hashed key.
	for _, want := range []string{"granted key=" + leakcheck.HashedBearer, "recorded key=" + leakcheck.HashedBearer, "key=" + leakcheck.HashedBearer + " request=",
		"store_error store=sqlite op=record key=" + leakcheck.HashedBearer, "store_error store=sqlite op=reserve key=" + leakcheck.HashedBearer,
		"sent anyway (send uncounted)", `not sent: recording the request under key "` + leakcheck.HashedBearer + `"`} {
		if !strings.Contains(seen, want) {
			t.Errorf("nothing logged or observed contains %q: a path was not reached\n%s", want, seen)
		}
	}
}

// TestMiddlewareNoCredentialLeaksSQLite: Limiters keyed by Authorization over the SQLite store,
// with a rolling and a fixed window of 1 a minute, admit (200) and refuse (429) a request
// carrying a bearer token each, and answer 503 once the store is closed; the handler sees the
// hashed key as Admission.Key, the hashed key is in each of SQLite's two tables once, and the
// token is in no stored key, response, event or error (the SQLite part of the middleware's
// TestNoCredentialLeaks).
func TestMiddlewareNoCredentialLeaksSQLite(t *testing.T) {
	const mwKey = leakcheck.MiddlewareKey
	rolling := must(rollingwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	fixed := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	sq := openSQLite(t, sqlitestore.Options{})
	got := &leakcheck.Seen{}
	var handled []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := middleware.FromContext(r.Context())
		handled = append(handled, a.Key)
	})
	run := func(s *engine.Strategy, codes ...int) {
		l, err := middleware.New(sq, s, middleware.WithKeyHeader("Authorization"), middleware.WithObserver(got), middleware.WithErrorHandler(got.OnError))
		if err != nil {
			t.Fatal(err)
		}
		if k := l.HeaderKey(leakcheck.Bearer); k != mwKey {
			t.Errorf("HeaderKey = %q, want %q", k, mwKey)
		}
		h := l.Wrap(handler)
		for _, want := range codes {
			w := serve(h, "/x", "192.0.2.1:1", map[string]string{"Authorization": leakcheck.Bearer})
			got.Add(fmt.Sprintf("%d %v %s", w.Code, w.Header(), w.Body))
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
	if strings.Count(all, mwKey) != 2 || leakcheck.Leaks(all) {
		t.Errorf("stored keys, want the hashed key in both SQLite tables, and no token:\n%s", all)
	}
	sq.Close()
	run(fixed, down)
	out := got.String()
	if leakcheck.Leaks(out) {
		t.Errorf("the token appears in what was observed, handled or answered:\n%s", out)
	}
	for _, want := range []string{"admitted key=" + mwKey, "rejected key=" + mwKey, "503", "429"} {
		if !strings.Contains(out, want) {
			t.Errorf("nothing observed or answered contains %q: a path was not reached\n%s", want, out)
		}
	}
}

package middleware

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

const (
	secretToken = "s3cr3tTOKEN42"
	// hashedBearer: printf %s "Bearer s3cr3tTOKEN42" | openssl dgst -sha256 -hmac
	// "<ratemonitor.DefaultKeySecret>", its first 32 hexadecimal digits, after "key:hmac:".
	hashedBearer = "key:hmac:dbfc2dad875aa255a85a76865e814fb0"
)

// seen collects what the observer and the error handler received.
type seen struct {
	mu  sync.Mutex
	all []string
}

func (s *seen) Observe(e observe.Event) { s.add(fmt.Sprintf("%s %+v", e, e)) }
func (s *seen) onError(_ *http.Request, err error) {
	s.add(err.Error())
}
func (s *seen) add(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, v)
}
func (s *seen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.all, "\n")
}

// TestNoCredentialLeaks: a Limiter keyed by Authorization over the memory, SQLite and Redis
// stores admits, refuses and fails (store closed) requests carrying a bearer token; the token
// appears in no response, Admission, event, error or stored key, and the hashed key is what
// the stores hold.
func TestNoCredentialLeaks(t *testing.T) {
	ctx := context.Background()
	rolling := must(rollingwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	fixed := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	mem, _ := newStore(t)
	sq, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "leak.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: "leak"})
	if err != nil {
		t.Fatal(err)
	}
	got := &seen{}
	var handled []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		handled = append(handled, a.Key)
	})
	run := func(st cache.Store, s *strategy.Strategy, codes ...int) {
		l, err := New(st, s, WithKeyHeader("Authorization"), WithObserver(got), WithErrorHandler(got.onError))
		if err != nil {
			t.Fatal(err)
		}
		if k := l.HeaderKey("Bearer " + secretToken); k != hashedBearer {
			t.Errorf("HeaderKey = %q, want %q", k, hashedBearer)
		}
		h := l.Wrap(handler)
		for _, want := range codes {
			w := serve(h, "/x", "192.0.2.1:1", map[string]string{"Authorization": "Bearer " + secretToken})
			got.add(fmt.Sprintf("%d %v %s", w.Code, w.Header(), w.Body))
			if w.Code != want {
				t.Errorf("status %d, want %d", w.Code, want)
			}
		}
	}
	ok, refused, down := http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable
	run(mem, rolling, ok, refused)
	run(sq, rolling, ok, refused)
	run(sq, fixed, ok, refused)
	run(rs, rolling, ok, refused)
	for _, k := range handled {
		if k != hashedBearer {
			t.Errorf("Admission.Key %q, want %q", k, hashedBearer)
		}
	}

	var stored []string
	for _, table := range []string{"rate_limit_state", "rate_limit_windows"} {
		rows, err := sq.DB().QueryContext(ctx, "SELECT key FROM "+table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			rows.Scan(&k)
			stored = append(stored, k)
		}
		rows.Close()
	}
	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		stored = append(stored, k)
		if _, rest, ok := strings.Cut(k, "{k"); ok {
			enc, _, _ := strings.Cut(rest, "}")
			dec, _ := base64.RawURLEncoding.DecodeString(enc)
			stored = append(stored, "decoded: "+string(dec))
		}
	}
	all := strings.Join(stored, "\n")
	if strings.Count(all, hashedBearer) != 3 || strings.Contains(all, secretToken) {
		t.Errorf("stored keys, want the hashed key in both SQLite tables and in Redis, and no token:\n%s", all)
	}

	// Stores closed: 503 and an error for the handler.
	mem.Close()
	sq.Close()
	srv.Stop()
	run(mem, rolling, down)
	run(sq, fixed, down)
	run(rs, rolling, down)
	out := got.String()
	if strings.Contains(out, secretToken) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("Bearer "+secretToken))) {
		t.Errorf("the token appears in what was observed, handled or answered:\n%s", out)
	}
	for _, want := range []string{"admitted key=" + hashedBearer, "rejected key=" + hashedBearer, "503", "429"} {
		if !strings.Contains(out, want) {
			t.Errorf("nothing observed or answered contains %q: a path was not reached\n%s", want, out)
		}
	}
}

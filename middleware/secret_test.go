package middleware

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestNoCredentialLeaks: a Limiter keyed by Authorization over the memory store admits,
// refuses and fails (store closed) requests carrying a bearer token; the token appears in no
// response, Admission, event or error, and the handler sees the hashed key. The SQLite and
// Redis stores' parts, which also read the keys the store wrote, are in
// cache/sqlitestore/internal/transporttest and cache/redisstore/internal/middlewaretest.
func TestNoCredentialLeaks(t *testing.T) {
	rolling := must(rollingwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	mem, _ := newStore(t)
	got := &seen{}
	var handled []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		handled = append(handled, a.Key)
	})
	run := func(codes ...int) {
		l, err := New(mem, rolling, WithKeyHeader("Authorization"), WithObserver(got), WithErrorHandler(got.onError))
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
	run(http.StatusOK, http.StatusTooManyRequests)
	if len(handled) != 1 || handled[0] != hashedBearer {
		t.Errorf("Admission.Key %q, want %q once", handled, hashedBearer)
	}

	// Store closed: 503 and an error for the handler.
	mem.Close()
	run(http.StatusServiceUnavailable)
	out := got.String()
	if strings.Contains(out, secretToken) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte("Bearer "+secretToken))) {
		t.Errorf("the token appears in what was observed, handled or answered:\n%s", out)
	}
	for _, want := range []string{"admitted key=" + hashedBearer, "rejected key=" + hashedBearer, "503", "429", "store is closed"} {
		if !strings.Contains(out, want) {
			t.Errorf("nothing observed or answered contains %q: a path was not reached\n%s", want, out)
		}
	}
}

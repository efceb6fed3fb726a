package ratemonitor

import (
	"bytes"
	"context"
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
	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestNoCredentialLeaks sends requests carrying a bearer token (and, in some URLs, the token as
// a query parameter) through every failure path a Transport has, over the memory store, and
// checks that the token appears in no error, log line or observer event. The stores' own cases
// are TestNoCredentialLeaksRedis (cache/redisstore/internal/transporttest) and
// TestTransportNoCredentialLeaksSQLite (cache/sqlitestore/internal/transporttest).
func TestNoCredentialLeaks(t *testing.T) {
	up := leakcheck.Upstream(t)
	ctx := context.Background()
	w := &leakcheck.Watch{}
	byAuth := WithKeyFunc(KeyByHeader("Authorization", nil))
	common := func(opts ...Option) []Option {
		return append([]Option{byAuth, WithLogger(w.Logger()), WithObserver(w), WithErrorHandler(w.OnError)}, opts...)
	}
	withToken := up.URL + "/skewed?access_token=" + leakcheck.Token

	t.Run("memory store closed", func(t *testing.T) {
		closed, _ := cache.NewMemory(cache.MemoryConfig{Observer: w})
		closed.Close()
		for _, p := range []StoreErrorPolicy{SendUncounted, SendNothing, Degrade} {
			tr := newTransport(t, nil, common(WithRules(minute), WithStore(closed), WithStoreErrorPolicy(p), WithSync(SyncConfig{}))...)
			paced := newTransport(t, nil, common(WithRules(minute), WithStore(closed), WithStoreErrorPolicy(p), WithPacing())...)
			leakcheck.Send(ctx, w, tr, withToken) // record fails; under SendUncounted the 429 then fails to sync
			leakcheck.Send(ctx, w, paced, withToken)
			_, err := paced.Reserve(ctx, paced.Key(authRequest(up.URL)), 1)
			w.Err(err)
		}
	})

	t.Run("memory store: deadline, burst, pause, skew", func(t *testing.T) {
		clk := clock.NewManual(t0)
		tr := newTransport(t, nil, common(WithRules(strategy.Rule{Limit: 1, Window: time.Minute}), WithPacing(), WithClock(clk),
			WithSync(SyncConfig{}))...)
		if err := leakcheck.Send(ctx, w, tr, withToken); err != nil { // granted; the 429 dated 1970 pauses the key and is logged
			t.Fatal(err)
		}
		dl, cancel := context.WithTimeout(ctx, 30*time.Second) // the waits below are a minute: refused at once
		defer cancel()
		var de *DeadlineError
		if err := leakcheck.Send(dl, w, tr, up.URL+"/ok?token="+leakcheck.Token); !errors.As(err, &de) || de.Key != leakcheck.HashedBearer {
			t.Errorf("past the deadline: %v, want a DeadlineError on %s", err, leakcheck.HashedBearer)
		}
		key := tr.Key(authRequest(up.URL))
		_, err := tr.Reserve(ctx, key, 2)
		w.Err(err)
		_, err = tr.WaitTime(ctx, key, 2)
		w.Err(err)
		w.Err(tr.Wait(dl, key, 1))
		st, err := tr.Status(ctx, key)
		w.Err(err)
		w.Add(fmt.Sprintf("%+v", st))
	})

	all := w.Check(t)
	// The paths above did reach the places they test.
	for _, want := range []string{"key=" + leakcheck.HashedBearer, "not sent", "past the context's deadline", "could not store what the upstream said",
		"the upstream's Date", "degraded", "skewed_date", "paused", "too_many_requests", "access_token=xxxxx", "store_error"} {
		if !strings.Contains(all, want) {
			t.Errorf("nothing logged or observed contains %q: a path was not reached", want)
		}
	}
}

// authRequest is a GET of url carrying leakcheck's bearer token.
func authRequest(url string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", leakcheck.Bearer)
	return req
}

// TestLogRedactsUserInfoCredential: Stripe documents its secret key as the Basic user name
// (curl -u sk_test_...:), and net/http sends a URL's user info as Basic credentials: the
// Transport's log line for a skewed Date (and every other line that names the request:
// syncFailed) redacts the whole user info, not only the password (before issue 15's fix the
// secret key was logged).
func TestLogRedactsUserInfoCredential(t *testing.T) {
	const key = "sk_test_SECRETkey"
	up := leakcheck.Upstream(t)
	w := &leakcheck.Watch{}
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 10, Window: time.Minute}), WithClock(clk),
		WithSync(SyncConfig{}), WithLogger(w.Logger()), WithObserver(w), WithErrorHandler(w.OnError))
	u := strings.Replace(up.URL, "http://", "http://"+key+":@", 1) + "/skewed"
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	logs := w.Logs()
	if !strings.Contains(logs, "upstream's Date") {
		t.Fatalf("no skewed-Date line logged:\n%s", logs)
	}
	if strings.Contains(logs, key) {
		t.Errorf("the log shows the Basic user name (Stripe's secret key):\n%s", logs)
	}
}

// TestCostErrorHidesCredential: with KeyByHeader("Authorization", nil) the WithCost refusal names
// the hashed key, not the bearer token.
func TestCostErrorHidesCredential(t *testing.T) {
	tr, err := New(http.DefaultTransport,
		WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		WithKeyFunc(KeyByHeader("Authorization", nil)),
		WithCost(func(*http.Request) int { return 11 }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	req.Header.Set("Authorization", "Bearer ghp_SECRETTOKEN")
	_, err = tr.RoundTrip(req)
	if err == nil || strings.Contains(err.Error(), "SECRETTOKEN") {
		t.Errorf("RoundTrip: %v (the credential is in the error)", err)
	}
}

// TestSyncLogHidesQueryToken: WithSync's warnings do not log a credential in the query string.
func TestSyncLogHidesQueryToken(t *testing.T) {
	var buf syncBuffer
	now := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", now.Add(-time.Hour).UTC().Format(http.TimeFormat)) // a skewed Date
		w.Header().Set("Retry-After", now.Add(-time.Hour+30*time.Second).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	tr, err := New(srv.Client().Transport,
		WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		WithSync(SyncConfig{}),
		WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/conversations.list?token=xoxb-SECRETTOKEN", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if out := buf.String(); out == "" || strings.Contains(out, "SECRETTOKEN") {
		t.Errorf("the log has the credential (or nothing was logged): %s", out)
	}
}

// syncBuffer is a bytes.Buffer that the logger may write to from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestRedisDownAndBack stops the test's own redis-server in the middle of a run: under
// FailOpen requests still go and each error is reported; under FailClosed RoundTrip fails fast
// with a clear error; once Redis is back both recover without a restart.
func TestRedisDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	up, hits := upstream(t, nil)
	key := strings.TrimPrefix(up.URL, "http://")
	var reported atomic.Int64
	open := newTransport(t, nil, WithRules(minute), WithStore(store), WithLogger(discard),
		WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }))
	closed := newTransport(t, nil, WithRules(minute), WithStore(store), WithLogger(discard),
		WithErrorPolicy(FailClosed), WithPacing())
	send := func(tr *Transport) error {
		_, err := get(t, &http.Client{Transport: tr}, up.URL)
		return err
	}
	for range 3 {
		if err := errors.Join(send(open), send(closed)); err != nil {
			t.Fatal(err)
		}
	}
	if u := usedOf(t, open, key); u[0] != 6 {
		t.Fatalf("used %v, want 6", u)
	}

	srv.Stop()
	for range 3 {
		if err := send(open); err != nil {
			t.Errorf("fail open with Redis down: %v", err)
		}
	}
	if hits.Load() != 9 || reported.Load() != 3 {
		t.Errorf("fail open: upstream hits %d (want 9), errors reported %d (want 3)", hits.Load(), reported.Load())
	}
	start := time.Now()
	err = send(closed)
	var se *StoreError
	if !errors.As(err, &se) || time.Since(start) > time.Second || hits.Load() != 9 {
		t.Errorf("fail closed with Redis down: %v after %v, hits %d", err, time.Since(start), hits.Load())
	}

	srv.Restart()
	for range 2 {
		if err := errors.Join(send(open), send(closed)); err != nil {
			t.Fatalf("after Redis came back: %v", err)
		}
	}
	if u := usedOf(t, open, key); u[0] != 4 {
		t.Errorf("used %v after the restart (an empty Redis), want 4", u)
	}
}

// TestRedisHangsFailClosed: a Redis that does not answer makes a fail-closed RoundTrip return
// within the store's timeout (100 ms by default), with an error wrapping DeadlineExceeded.
func TestRedisHangsFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	store, _ := redisstore.New(client, redisstore.Options{})
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute), WithStore(store),
		WithErrorPolicy(FailClosed), WithLogger(discard))
	req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if err := client.Do(context.Background(), "CLIENT", "PAUSE", "1000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := tr.RoundTrip(req)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || elapsed > 900*time.Millisecond {
		t.Errorf("RoundTrip against a paused Redis: %v after %v; want DeadlineExceeded well before the pause ends", err, elapsed)
	}
	t.Logf("fail-closed answer after %v", elapsed.Round(time.Millisecond))
	time.Sleep(time.Second) // let the pause end before the server is stopped
}

// TestRedisRefusesRulesAtNew: a rule the Redis store cannot hold is refused when the Transport
// is made, not request by request.
func TestRedisRefusesRulesAtNew(t *testing.T) {
	srv := redistest.Start(t)
	store, _ := redisstore.New(srv.Client(), redisstore.Options{})
	_, err := New(nil, WithRules(day), WithStore(store))
	if err == nil || !strings.Contains(err.Error(), "Granularity") {
		t.Errorf("a day at 1 s granularity over Redis: %v", err)
	}
	if _, err := New(nil, WithRules(strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute}), WithStore(store)); err != nil {
		t.Errorf("a day at 1 min granularity: %v", err)
	}
}

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

// TestRedisSyncIsShared: what one process learns from a 429 holds every process sharing
// Redis. Two stores over one Redis stand for two processes; the pause is on Redis's clock.
func TestRedisSyncIsShared(t *testing.T) {
	srv := redistest.Start(t)
	a := &answer{}
	up, hits := upstream(t, a.serve)
	var trs []*Transport
	for range 2 {
		st, err := redisstore.New(srv.Client(), redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		day := strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}
		trs = append(trs, newTransport(t, nil, WithRules(minute, day), WithStore(st), WithLogger(discard),
			WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)), WithSync(SyncConfig{}), WithPacing()))
	}
	a.set(429, "Retry-After", "20", "X-Rate-Limit-Problem", "day", "X-DayLimit-Remaining", "0", "X-MinLimit-Remaining", "55")
	get(t, &http.Client{Transport: trs[0]}, up.URL, "Xero-Tenant-Id", "t1")
	s := status(t, trs[1], "t1")
	if s.Rules[0].Used != 5 || s.Rules[1].Used != 5000 || s.Rules[1].Reported != 0 || s.PausedUntil.IsZero() {
		t.Fatalf("the other process sees %+v", s)
	}
	if d := time.Until(s.PausedUntil); d <= 19*time.Second || d > 20*time.Second {
		t.Fatalf("pause ends in %v, want about 20 s", d)
	}
	// The other process's paced requests wait out the pause: a deadline of 5 s is refused at
	// once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
	req.Header.Set("Xero-Tenant-Id", "t1")
	start := time.Now()
	if _, err := (&http.Client{Transport: trs[1]}).Do(req); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("paced request on a day-exhausted key: %v after %v", err, time.Since(start))
	}
	if hits.Load() != 1 {
		t.Fatalf("upstream hits %d, want 1", hits.Load())
	}
	// A short pause alone: the other process waits it out and then sends.
	a.set(429, "Retry-After", "1")
	get(t, &http.Client{Transport: trs[0]}, up.URL, "Xero-Tenant-Id", "t2")
	a.set(200)
	start = time.Now()
	if _, err := get(t, &http.Client{Transport: trs[1]}, up.URL, "Xero-Tenant-Id", "t2"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("the other process sent %v after a 1 s pause began", took)
	}
}

package transporttest

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestPoliciesRecoverWhenRedisReturns stops the test's own redis-server in the middle of a run: under
// SendUncounted requests still go and each error is reported; under SendNothing RoundTrip fails fast
// with a clear error (a refused dial: at once; 5 s leaves room for a loaded machine, and is far
// below the minute a paced request would wait); once Redis is back both recover without a
// restart.
func TestPoliciesRecoverWhenRedisReturns(t *testing.T) {
	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{})
	up, hits := upstreamtest.Counting(t, nil)
	key := strings.TrimPrefix(up.URL, "http://")
	var reported atomic.Int64
	open := newTransport(t, nil, ratemonitor.WithRules(minute), ratemonitor.WithStore(store), ratemonitor.WithLogger(discard),
		ratemonitor.WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }))
	closed := newTransport(t, nil, ratemonitor.WithRules(minute), ratemonitor.WithStore(store), ratemonitor.WithLogger(discard),
		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing), ratemonitor.WithPacing())
	send := func(tr *ratemonitor.Transport) error {
		_, err := upstreamtest.Get(t, &http.Client{Transport: tr}, up.URL)
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
	err := send(closed)
	var se *ratemonitor.StoreError
	if !errors.As(err, &se) || time.Since(start) > 5*time.Second || hits.Load() != 9 {
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

// TestSendNothingFailsWithinTimeoutWhenRedisHangs: a Redis that does not answer makes a fail-closed RoundTrip return
// within the store's timeout (100 ms by default), with an error wrapping DeadlineExceeded: well
// before the 3 s pause ends (2 s, twenty timeouts, leaves room for a loaded machine).
func TestSendNothingFailsWithinTimeoutWhenRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	store, err := redisstore.New(client, redisstore.Options{}) // the default timeout, under test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	empty := upstreamtest.RoundTripFunc(func(*http.Request) (*http.Response, error) { return &http.Response{}, nil })
	tr := newTransport(t, empty, ratemonitor.WithRules(minute), ratemonitor.WithStore(store),
		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing), ratemonitor.WithLogger(discard))
	req, _ := http.NewRequest(http.MethodGet, "https://a.example/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	// CLIENT PAUSE ALL holds every client's commands, the store's included.
	const pause = 3 * time.Second
	if err := client.Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tr.RoundTrip(req)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || elapsed > 2*time.Second {
		t.Errorf("RoundTrip against a paused Redis: %v after %v; want DeadlineExceeded well before the pause ends", err, elapsed)
	}
	t.Logf("fail-closed answer after %v", elapsed.Round(time.Millisecond))
	time.Sleep(time.Until(start.Add(pause))) // let the pause end (CLIENT UNPAUSE waits for it too) before the server is stopped
}

// TestRedisRefusesRulesAtNew: a rule the Redis store cannot hold is refused when the Transport
// is made, not request by request.
func TestRedisRefusesRulesAtNew(t *testing.T) {
	srv := redistest.Start(t)
	store := newStore(t, srv, redisstore.Options{})
	_, err := ratemonitor.New(nil, ratemonitor.WithRules(day), ratemonitor.WithStore(store))
	if err == nil || !strings.Contains(err.Error(), "Granularity") {
		t.Errorf("a day at 1 s granularity over Redis: %v", err)
	}
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute}), ratemonitor.WithStore(store))
	if err != nil {
		t.Errorf("a day at 1 min granularity: %v", err)
	} else {
		tr.Close()
	}
}

// TestRedisSyncIsShared: what one process learns from a 429 holds every process sharing
// Redis. Two stores over one Redis stand for two processes; the pause is on Redis's clock
// (this machine's), so each instant is judged against the real instants taken around the
// step that set it, not against the time elapsed since.
func TestRedisSyncIsShared(t *testing.T) {
	srv := redistest.Start(t)
	a := &upstreamtest.Answer{}
	var mu sync.Mutex
	var arrived []time.Time
	up, hits := upstreamtest.Counting(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
		a.Serve(w, r)
	})
	var trs []*ratemonitor.Transport
	for range 2 {
		st := newStore(t, srv, redisstore.Options{})
		trs = append(trs, newTransport(t, nil, ratemonitor.WithRules(minute, day10), ratemonitor.WithStore(st), ratemonitor.WithLogger(discard),
			ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)), ratemonitor.WithSync(ratemonitor.SyncConfig{}), ratemonitor.WithPacing()))
	}
	a.Set(429, "Retry-After", "20", "X-Rate-Limit-Problem", "day", "X-DayLimit-Remaining", "0", "X-MinLimit-Remaining", "55")
	before := time.Now()
	upstreamtest.Get(t, &http.Client{Transport: trs[0]}, up.URL, "Xero-Tenant-Id", "t1")
	s := status(t, trs[1], "t1")
	after := time.Now()
	if s.Rules[0].Used != 5 || s.Rules[1].Used != 5000 || s.Rules[1].Reported != 0 || s.PausedUntil.IsZero() {
		t.Fatalf("the other process sees %+v", s)
	}
	// 20 s from the 429's instant, which lies between before and after (a second of slack
	// below, as before the instants were taken around it).
	if d := s.PausedUntil.Sub(before); d <= 19*time.Second || s.PausedUntil.After(after.Add(20*time.Second)) {
		t.Fatalf("pause ends %v after the 429 was sent (and %v after it was seen), want about 20 s", d, s.PausedUntil.Sub(after))
	}
	// The other process's paced requests wait out the pause: a deadline of 5 s is refused at
	// once (within 4 s: sooner than the deadline, on a loaded machine too).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
	req.Header.Set("Xero-Tenant-Id", "t1")
	start := time.Now()
	if _, err := (&http.Client{Transport: trs[1]}).Do(req); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 4*time.Second {
		t.Fatalf("paced request on a day-exhausted key: %v after %v", err, time.Since(start))
	}
	if hits.Load() != 1 {
		t.Fatalf("upstream hits %d, want 1", hits.Load())
	}
	// A short pause alone: the other process waits it out and then sends: its request reaches
	// the upstream no sooner than the pause it was told of ends.
	a.Set(429, "Retry-After", "1")
	upstreamtest.Get(t, &http.Client{Transport: trs[0]}, up.URL, "Xero-Tenant-Id", "t2")
	a.Set(200)
	until := status(t, trs[1], "t2").PausedUntil
	if _, err := upstreamtest.Get(t, &http.Client{Transport: trs[1]}, up.URL, "Xero-Tenant-Id", "t2"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	sent := arrived[len(arrived)-1]
	mu.Unlock()
	if until.IsZero() || sent.Before(until) {
		t.Fatalf("the other process sent %v before the 1 s pause it was told of ended (paused until %v)", until.Sub(sent), until)
	}
}

// cancelAfterKey is the Redis store; the caller's context is cancelled right after the
// request key's Reserve returns (the caller gives up while the app key is being asked).
type cancelAfterKey struct {
	*redisstore.Store
	cancel atomic.Pointer[context.CancelFunc]
}

func (c *cancelAfterKey) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := c.Store.Reserve(ctx, s, key, n)
	if key != "app" {
		if f := c.cancel.Load(); f != nil {
			(*f)()
		}
	}
	return res, err
}

// TestRedisCancelIsNotAStoreError: a caller cancelling between the key's and the app key's
// reservation gets its context's error under either policy: no store failure is reported,
// nothing is sent, no slot is kept.
func TestRedisCancelIsNotAStoreError(t *testing.T) {
	srv := redistest.Start(t)
	rs := newStore(t, srv, redisstore.Options{})
	for _, policy := range []ratemonitor.StoreErrorPolicy{ratemonitor.SendUncounted, ratemonitor.SendNothing} {
		st := &cancelAfterKey{Store: rs}
		var sent, reported atomic.Int64
		base := upstreamtest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			sent.Add(1)
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		key := "k-" + policy.String()
		tr := newTransport(t, base, ratemonitor.WithStore(st), ratemonitor.WithRules(minute), ratemonitor.WithAppRules("app", minute),
			ratemonitor.WithPacing(), ratemonitor.WithStoreErrorPolicy(policy), ratemonitor.WithLogger(discard),
			ratemonitor.WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }))
		ctx, cancel := context.WithCancel(context.Background())
		st.cancel.Store(&cancel)
		req, _ := http.NewRequestWithContext(ratemonitor.WithKey(ctx, key), http.MethodGet, "http://example.invalid/", nil)
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		st.cancel.Store(nil)
		var se *ratemonitor.StoreError
		u := used(t, tr, key)
		if errors.As(err, &se) || !errors.Is(err, context.Canceled) || reported.Load() != 0 || sent.Load() != 0 || u != 0 {
			t.Errorf("%v: cancelled by the caller: err %v (StoreError %v), store errors reported %d, passed to base %d, key counts %d; want ctx.Err(), nothing reported, sent or counted",
				policy, err, se != nil, reported.Load(), sent.Load(), u)
		}
		cancel()
	}
}

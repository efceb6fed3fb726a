package ratemonitor

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// statusBase answers each request with the next status of its script (200 when it runs out),
// a 429 with Retry-After: 5.
type statusBase struct{ statuses []int }

func (b *statusBase) RoundTrip(req *http.Request) (*http.Response, error) {
	code := http.StatusOK
	if len(b.statuses) > 0 {
		code, b.statuses = b.statuses[0], b.statuses[1:]
	}
	h := http.Header{}
	if code == http.StatusTooManyRequests {
		h.Set("Retry-After", "5")
	}
	return &http.Response{StatusCode: code, Header: h, Body: http.NoBody, Request: req}, nil
}

func wantEvents(t *testing.T, rec *observetest.Recorder, want ...string) {
	t.Helper()
	if got := rec.Strings(); !slices.Equal(got, want) {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	rec.Reset()
}

// advanceWhenAsleep advances clk by d as soon as one goroutine sleeps on it.
func advanceWhenAsleep(clk *clock.Manual, d time.Duration) {
	for clk.Sleepers() != 1 {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(d)
}

// TestObserverSeesEveryEventExactly runs a scripted Transport on a manual clock over the memory
// store and checks every event the observer receives, exactly.
func TestObserverSeesEveryEventExactly(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	get := func(tr *Transport) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	t.Run("monitoring", func(t *testing.T) {
		clk := clock.NewManual(t0)
		rec := &observetest.Recorder{}
		tr, err := New(&statusBase{statuses: []int{200, 429}}, WithRules(strategy.Rule{Limit: 3, Window: 10 * time.Second}),
			WithClock(clk), WithSync(SyncConfig{}), WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		get(tr)
		wantEvents(t, rec, "recorded key=api.test n=1")
		get(tr) // 429, Retry-After: 5
		wantEvents(t, rec, "recorded key=api.test n=1", "too_many_requests key=api.test",
			"paused key=api.test until=2026-11-30T12:00:05Z")
		// Wait sits out the pause: 5 s on the manual clock.
		done := make(chan error)
		go func() { done <- tr.Wait(ctx, "api.test", 1) }()
		advanceWhenAsleep(clk, 5*time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		wantEvents(t, rec, "waited key=api.test n=1 wait=5s")
		if err := tr.Wait(ctx, "api.test", 1); err != nil { // no wait: no event
			t.Fatal(err)
		}
		wantEvents(t, rec)
		// The store New made reports to the same observer: after Close, SendUncounted sends
		// uncounted and the store's error is an event.
		tr.Close()
		get(tr)
		wantEvents(t, rec, "store_error store=memory op=record key=api.test err="+cache.ErrClosed.Error())
	})

	t.Run("pacing", func(t *testing.T) {
		clk := clock.NewManual(t0)
		rec := &observetest.Recorder{}
		tr, err := New(&statusBase{}, WithRules(strategy.Rule{Limit: 1, Window: 10 * time.Second}),
			WithClock(clk), WithPacing(), WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		get(tr)
		wantEvents(t, rec, "granted key=api.test n=1")
		done := make(chan int)
		go func() { done <- get(tr) }()
		advanceWhenAsleep(clk, 10*time.Second)
		if code := <-done; code != http.StatusOK {
			t.Fatal(code)
		}
		// The first try, without queueing, is refused; so is the head of the queue's first
		// try; after 10 s the third is granted: each reserve asked of the store is an event.
		wantEvents(t, rec, "refused key=api.test n=1 wait=10s", "refused key=api.test n=1 wait=10s",
			"granted key=api.test n=1", "waited key=api.test n=1 wait=10s")
		// Reserve of 1 more: refused for 10 s, then granted.
		go func() { advanceWhenAsleep(clk, 10*time.Second) }()
		r, err := tr.Reserve(ctx, "api.test", 1)
		if err != nil {
			t.Fatal(err)
		}
		r.Cancel(ctx)
		// The first try, without queueing, is refused; so is the head of the queue's first
		// try; after 10 s the third is granted: each reserve asked of the store is an event.
		wantEvents(t, rec, "refused key=api.test n=1 wait=10s", "refused key=api.test n=1 wait=10s",
			"granted key=api.test n=1", "waited key=api.test n=1 wait=10s")
	})

	t.Run("nil", func(t *testing.T) {
		if _, err := New(nil, WithRules(strategy.Rule{Limit: 1, Window: time.Second}), WithObserver(nil)); err == nil {
			t.Fatal("WithObserver(nil) accepted")
		}
	})
}

// TestStoreErrorLogIsRateLimited: a closed store fails every request; the log gets one
// warning, not one per request, and the observer one event per request.
func TestStoreErrorLogIsRateLimited(t *testing.T) {
	var logs bytes.Buffer
	rec := &observetest.Recorder{}
	tr, err := New(&statusBase{}, WithRules(strategy.Rule{Limit: 100, Window: time.Minute}), WithObserver(rec),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	// One warning an hour here, so that the count does not depend on how long the 50
	// requests take on the wall clock (the limiter's default is one a second).
	tr.fail.storeWarn.Every = time.Hour
	tr.Close()
	for range 50 {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings for 50 failures:\n%s", n, logs.String())
	}
	if n := len(rec.Events()); n != 50 {
		t.Fatalf("%d events, want 50", n)
	}
}

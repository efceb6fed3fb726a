package ratemonitor

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/lograte"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestSyncImplausibleDateMeasuredFromOurClock: a 429 whose Retry-After is now + 5 s as an
// HTTP-date, in a response dated 1970 (an upstream whose clock was never set), pauses for 5 s
// measured from our clock, not for MaxPause; the Date is reported once per response (one warning,
// rate-limited, and one SkewedDate event). A Date 30 s off is a plausible skew: the wait is still
// measured from it, and nothing is reported.
func TestSyncImplausibleDateMeasuredFromOurClock(t *testing.T) {
	var logs bytes.Buffer
	rec := &observetest.Recorder{}
	c, tr, a, clk, _ := syncSetup(t, SyncConfig{}, WithObserver(rec),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	// The limiter allows one warning an hour here, so that the second response's is held back
	// whatever the wall clock does between them.
	tr.sync.dateWarn = &lograte.Limiter{Every: time.Hour}
	srv, _ := upstreamtest.Counting(t, a.Serve)
	httpDate := func(at time.Time) string { return at.UTC().Format(http.TimeFormat) }
	epoch := "Thu, 01 Jan 1970 00:00:00 GMT"

	// The Xero reader reads the same Retry-After for the minute problem: one report still.
	a.Set(429, "Retry-After", httpDate(t0.Add(5*time.Second)), "Date", epoch, "X-Rate-Limit-Problem", "minute")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	s := status(t, tr, "t1")
	if s.Wait != 5*time.Second || !s.PausedUntil.Equal(t0.Add(5*time.Second)) || s.Rules[0].Used != 60 {
		t.Fatalf("after a 429 dated 1970: wait %v, paused until %v, minute used %d; want 5s, t0+5s, 60",
			s.Wait, s.PausedUntil.Sub(t0), s.Rules[0].Used)
	}
	skew := time.Unix(0, 0).Sub(t0) // -1.8e9 s
	wantEvents := []string{"recorded key=app n=1", "recorded key=t1 n=1", "too_many_requests key=t1", "skewed_date key=t1 wait=" + skew.String(),
		"paused key=t1 until=" + t0.Add(5*time.Second).UTC().Format(time.RFC3339Nano)}
	if got := rec.Strings(); strings.Join(got, "|") != strings.Join(wantEvents, "|") {
		t.Fatalf("events %q, want %q", got, wantEvents)
	}
	line := `level=WARN msg="ratemonitor: the upstream's Date is more than 5m0s from our clock; its Retry-After is measured from our clock instead. Check the upstream's clock (or ours)" key=t1 request="GET ` +
		srv.URL + `" date=1970-01-01T00:00:00Z skew=-500000h0m0s retry_after=5s suppressed=0`
	if got := logs.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, line) {
		t.Fatalf("log:\n%s\nwant one line containing:\n%s", got, line)
	}

	// The same response again: a second event, and the warning is held back (debug level).
	rec.Reset()
	logs.Reset()
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if got := rec.Strings(); strings.Join(got, "|") != strings.Join(wantEvents, "|") {
		t.Fatalf("second response's events %q", got)
	}
	if got := logs.String(); strings.Count(got, "\n") != 1 || !strings.HasPrefix(strings.SplitN(got, " ", 2)[1], "level=DEBUG") {
		t.Fatalf("second response's log, want one debug line:\n%s", got)
	}

	// An upstream 30 s ahead: its Retry-After of its Date + 5 s is 5 s, not 35 s, and is not
	// reported. A Date in the future far off is ignored as one in the past is.
	clk.Advance(time.Minute)
	now := t0.Add(time.Minute)
	rec.Reset()
	logs.Reset()
	a.Set(429, "Retry-After", httpDate(now.Add(35*time.Second)), "Date", httpDate(now.Add(30*time.Second)))
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t2")
	if s := status(t, tr, "t2"); s.Wait != 5*time.Second {
		t.Fatalf("a Date 30 s ahead: wait %v, want 5s", s.Wait)
	}
	a.Set(429, "Retry-After", httpDate(now.Add(7*time.Second)), "Date", httpDate(now.Add(24*time.Hour)))
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t3")
	if s := status(t, tr, "t3"); s.Wait != 7*time.Second {
		t.Fatalf("a Date a day ahead: wait %v, want 7s (not 0)", s.Wait)
	}
	want := []string{"recorded key=app n=1", "recorded key=t2 n=1", "too_many_requests key=t2", "paused key=t2 until=" + now.Add(5*time.Second).UTC().Format(time.RFC3339Nano),
		"recorded key=app n=1", "recorded key=t3 n=1", "too_many_requests key=t3", "skewed_date key=t3 wait=24h0m0s", "paused key=t3 until=" + now.Add(7*time.Second).UTC().Format(time.RFC3339Nano)}
	if got := rec.Strings(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestRetryAfterDateReadAgainstTheWallClockAfterAStep: a Transport on clock.Real (the default)
// in a process whose wall clock was stepped 10 min forward after it started (NTP setting a clock
// that booted wrong): clock.Real reads 10 min behind the wall clock for the rest of the process.
// A 429 with a correct Date and Retry-After = Date + 5 s pauses the key 5 s. Before the fix the
// correct Date was measured against clock.Real, found 10 min off (past MaxDateSkew), ignored,
// and the HTTP-date measured from clock.Real instead: a pause of 10 min 5 s. (The wall step is
// simulated through wallNow, pinned to a whole second so that the HTTP-dates are exact.)
//
// The pause starts when the response arrives, on the real clock: the wait left when WaitTime
// asks is 5 s less the real time since, which the test measures instead of assuming it short.
func TestRetryAfterDateReadAgainstTheWallClockAfterAStep(t *testing.T) {
	wall := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	wallNow = func() time.Time { return wall }
	t.Cleanup(func() { wallNow = time.Now })
	srv, _ := upstreamtest.Counting(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", wall.UTC().Format(http.TimeFormat))
		w.Header().Set("Retry-After", wall.Add(5*time.Second).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
	})
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 100, Window: time.Minute}), WithSync(SyncConfig{}))
	start := time.Now()
	if _, err := upstreamtest.Get(t, &http.Client{Transport: tr}, srv.URL); err != nil {
		t.Fatal(err)
	}
	key := srv.Listener.Addr().String()
	wait, err := tr.WaitTime(context.Background(), key, 1)
	elapsed := time.Since(start)
	if err != nil || wait > 5*time.Second || wait < 5*time.Second-elapsed {
		t.Fatalf("wait after the 429: %v, %v, %v after the request was sent; want 5 s less at most that (Retry-After = Date + 5 s)", wait, err, elapsed)
	}
}

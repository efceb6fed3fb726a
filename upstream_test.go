package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// syncSetup gives a monitoring Transport with Xero's tenant rules, an app rule, WithSync and a
// manual clock, over a store a second Transport can share.
func syncSetup(t *testing.T, cfg SyncConfig, opts ...Option) (*http.Client, *Transport, *upstreamtest.Answer, *clock.Manual, cache.Store) {
	clk := clock.NewManual(t0)
	st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a := &upstreamtest.Answer{}
	opts = append([]Option{WithStore(st), WithRules(minute, day), WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)),
		WithAppRules("app", strategy.Rule{Limit: 10_000, Window: time.Minute}), WithSync(cfg)}, opts...)
	tr := newTransport(t, nil, opts...)
	return &http.Client{Transport: tr}, tr, a, clk, st
}

// syncOn returns a client of a monitoring Transport over rules with a manual clock at t0.
func syncOn(t *testing.T, rules []strategy.Rule, opts ...Option) (*http.Client, *Transport, *clock.Manual) {
	clk := clock.NewManual(t0)
	st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tr := newTransport(t, nil, append([]Option{WithStore(st), WithRules(rules...)}, opts...)...)
	return &http.Client{Transport: tr}, tr, clk
}

// TestSyncRaisesUsageToTheUpstreamsCount: a response saying fewer remain than the Transport
// counts (another client of the tenant, another tenant of the app) raises the key's and the
// app key's usage to the upstream's figure, dated by the response; a later one saying more
// remain lowers nothing; other keys are untouched.
func TestSyncRaisesUsageToTheUpstreamsCount(t *testing.T) {
	c, tr, a, _, _ := syncSetup(t, SyncConfig{})
	srv, _ := upstreamtest.Counting(t, a.Serve)
	// Another client of this tenant has used 39 of the minute and 989 of the day; another
	// tenant has used 5000 of the app's minute.
	a.Set(200, "X-MinLimit-Remaining", "20", "X-DayLimit-Remaining", "4000", "X-AppMinLimit-Remaining", "4999")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	s := status(t, tr, "t1")
	if u := s.Rules; u[0].Used != 40 || u[0].Reported != 20 || !u[0].ReportedAt.Equal(t0) || u[1].Used != 1000 || u[1].Reported != 4000 {
		t.Fatalf("tenant after sync: %+v", u)
	}
	if u := s.Meters[0].Rules[0]; u.Used != 5001 || u.Reported != 4999 {
		t.Fatalf("app after sync: %+v", u)
	}
	// A later response that says more remain than we count lowers nothing.
	a.Set(200, "X-MinLimit-Remaining", "59", "X-DayLimit-Remaining", "4999")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if u := status(t, tr, "t1").Rules; u[0].Used != 41 || u[1].Used != 1001 || u[0].Reported != 59 {
		t.Fatalf("after a higher remaining: %+v", u)
	}
	// Other tenants are untouched.
	if u := usedOf(t, tr, "t2"); u[0] != 0 || u[1] != 0 {
		t.Fatalf("t2: %v", u)
	}
}

// TestSmallerReportedLimitLeavesUpstreamRemaining: an upstream that reports a limit of 10 with
// 4 remaining, against a rule of 100, leaves exactly 4: used is raised to 96.
func TestSmallerReportedLimitLeavesUpstreamRemaining(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "10")
		w.Header().Set("X-RateLimit-Remaining", "4")
	}))
	defer srv.Close()
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := New(srv.Client().Transport, WithClock(clk),
		WithRules(strategy.Rule{Limit: 100, Window: time.Minute}),
		WithKeyFunc(func(*http.Request) string { return "k" }),
		WithSync(SyncConfig{Readers: []headers.Reader{headers.XRateLimitReader(time.Minute, headers.ResetDelta)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := upstreamtest.SendWithin(tr, srv.URL, waitLimit); err != nil {
		t.Fatal(err)
	}
	if u := usedOf(t, tr, "k")[0]; u != 96 {
		t.Errorf("used %d after remaining 4 of a reported 10, want 96 (100 − 4)", u)
	}
}

// TestSyncPausesForRetryAfter: a 429 pauses its key until its Retry-After, for every Transport
// over the store, and uses up the rule its problem names until then (not for a whole window);
// a 429 without a readable Retry-After pauses for the fallback; a 503's HTTP-date is measured
// from its Date; a 503 without Retry-After and a 500 pause nothing; a pause ends on time.
func TestSyncPausesForRetryAfter(t *testing.T) {
	c, tr, a, clk, st := syncSetup(t, SyncConfig{Fallback: 5 * time.Second})
	srv, hits := upstreamtest.Counting(t, a.Serve)
	// A second Transport over the same store, as another part of the program would have.
	other := newTransport(t, nil, WithStore(st), WithRules(minute, day))

	a.Set(429, "Retry-After", "30", "X-Rate-Limit-Problem", "minute", "X-MinLimit-Remaining", "0")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	s := status(t, tr, "t1")
	// The minute rule is used up until the Retry-After, not for a whole window.
	if !s.PausedUntil.Equal(t0.Add(30*time.Second)) || s.Wait != 30*time.Second || s.Rules[0].Used != 60 {
		t.Fatalf("after a minute 429: %+v", s)
	}
	for _, x := range []*Transport{tr, other} {
		if d, err := x.WaitTime(context.Background(), "t1", 1); err != nil || d != 30*time.Second {
			t.Fatalf("wait after the 429: %v %v, want 30s", d, err)
		}
	}
	// The 59 raised stop counting at 30 s; our own request counts for its whole minute.
	clk.Advance(30 * time.Second)
	if u := status(t, tr, "t1").Rules[0]; u.Used != 1 {
		t.Fatalf("t1 at 30 s: %+v, want 1 used", u)
	}
	// A 429 with nothing readable pauses for the fallback; the minute rule is not touched.
	a.Set(429, "Retry-After", "soon")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t2")
	if s := status(t, tr, "t2"); !s.PausedUntil.Equal(t0.Add(35*time.Second)) || s.Wait != 5*time.Second || s.Rules[0].Used != 1 {
		t.Fatalf("after a 429 without Retry-After: %+v", s)
	}
	// A 503 with an HTTP-date pauses until that date, measured from the response's Date.
	a.Set(503, "Retry-After", "Thu, 15 Jan 2027 08:00:20 GMT", "Date", "Thu, 15 Jan 2027 08:00:00 GMT")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t3")
	if s := status(t, tr, "t3"); s.Wait != 20*time.Second {
		t.Fatalf("after a 503 with a date: %+v", s)
	}
	// A 503 without Retry-After, and a 500, pause nothing.
	a.Set(503)
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t4")
	a.Set(500, "Retry-After", "100")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t4")
	if s := status(t, tr, "t4"); s.Wait != 0 || !s.PausedUntil.IsZero() {
		t.Fatalf("after a 503 without Retry-After and a 500: %+v", s)
	}
	// The pause ends on time.
	clk.Advance(5 * time.Second)
	if s := status(t, tr, "t2"); s.Wait != 0 || !s.PausedUntil.IsZero() {
		t.Fatalf("t2 after its pause: %+v", s)
	}
	if hits.Load() != 5 {
		t.Fatalf("upstream saw %d requests, want 5", hits.Load())
	}
}

// TestSync403PrimaryLimitPauses: GitHub's primary limit answers 403 with
// X-RateLimit-Remaining: 0; without a reset the key pauses for the fallback, as a 429 would;
// a secondary limit's 403 with Retry-After pauses that long. A 403 without either field
// (permissions) pauses nothing.
func TestSync403PrimaryLimitPauses(t *testing.T) {
	c, tr, a, _, _ := syncSetup(t, SyncConfig{Fallback: 30 * time.Second})
	srv, _ := upstreamtest.Counting(t, a.Serve)
	a.Set(403)
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "plain")
	if s := status(t, tr, "plain"); !s.PausedUntil.IsZero() {
		t.Fatalf("a 403 about permissions paused the key until %v", s.PausedUntil)
	}
	a.Set(403, "X-RateLimit-Remaining", "0")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if s := status(t, tr, "t1"); !s.PausedUntil.Equal(t0.Add(30 * time.Second)) {
		t.Fatalf("403 with remaining 0 and no reset: paused until %v, want the fallback, %v", s.PausedUntil, t0.Add(30*time.Second))
	}
	a.Set(403, "Retry-After", "7")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t2")
	if s := status(t, tr, "t2"); !s.PausedUntil.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("403 with Retry-After 7: paused until %v", s.PausedUntil)
	}
}

// TestSyncXeroDayAndAppProblemsUseUpTheirRule: Xero's day problem uses up the day rule (not
// the minute one) and pauses the tenant; an app-minute problem pauses the app key, so every
// tenant waits, and not the tenant key.
func TestSyncXeroDayAndAppProblemsUseUpTheirRule(t *testing.T) {
	c, tr, a, _, _ := syncSetup(t, SyncConfig{})
	srv, _ := upstreamtest.Counting(t, a.Serve)
	// A day problem uses up the day rule, not the minute rule.
	a.Set(429, "Retry-After", "3600", "X-Rate-Limit-Problem", "day", "X-MinLimit-Remaining", "50")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	s := status(t, tr, "t1")
	if s.Rules[0].Used != 10 || s.Rules[1].Used != 5000 || s.Rules[1].Reported != 0 || s.Wait != time.Hour || !s.PausedUntil.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after a day 429: %+v", s)
	}
	if s.Meters[0].Rules[0].Used != 1 || !s.Meters[0].PausedUntil.IsZero() {
		t.Fatalf("the app key moved on a tenant's day problem: %+v", s.Meters)
	}
	// An app-minute problem pauses the app key, so every tenant waits, and not the tenant key.
	a.Set(429, "Retry-After", "12", "X-Rate-Limit-Problem", "appminute", "X-MinLimit-Remaining", "58")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t2")
	s = status(t, tr, "t2")
	if !s.PausedUntil.IsZero() || s.Rules[0].Used != 2 {
		t.Fatalf("the tenant key was paused by an app problem: %+v", s)
	}
	if s.Meters[0].Rules[0].Used != 10_000 || !s.Meters[0].PausedUntil.Equal(t0.Add(12*time.Second)) || s.Meters[0].Wait != 12*time.Second || s.Wait != 12*time.Second {
		t.Fatalf("app key after an app problem: %+v %+v", s, s.Meters)
	}
	if d, _ := tr.WaitTime(context.Background(), "t3", 1); d != 12*time.Second {
		t.Fatalf("a fresh tenant's wait while the app is full: %v, want 12s", d)
	}
}

// TestSyncReadsIETFAndXRateLimitFields: the IETF RateLimit fields and the X-RateLimit-* ones
// raise usage to the upstream's figure (its own limit when it says one), pause until their
// reset when used up, and raise nothing when the quota is already restored; malformed fields
// change nothing but the request's own count.
func TestSyncReadsIETFAndXRateLimitFields(t *testing.T) {
	c, tr, a, _, _ := syncSetup(t, SyncConfig{Readers: []headers.Reader{headers.IETFReader, headers.XRateLimitReader(24*time.Hour, headers.ResetEpoch)}})
	srv, _ := upstreamtest.Counting(t, a.Serve)
	a.Set(200, "RateLimit-Policy", `"burst";q=60;w=60, "daily";q=5000;w=86400`, "RateLimit", `"burst";r=15, "daily";r=4900`)
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if u := usedOf(t, tr, "t1"); u[0] != 45 || u[1] != 100 {
		t.Fatalf("IETF: used %v, want [45 100]", u)
	}
	// The upstream's own limit is taken when it says it: 6000 − 100 = 5900 used of our 5000.
	a.Set(200, "X-RateLimit-Limit", "6000", "X-RateLimit-Remaining", "100", "X-RateLimit-Reset", "1800003600")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t2")
	if u := status(t, tr, "t2").Rules[1]; u.Used != 5900 || u.Remaining != 0 || u.Reported != 100 {
		t.Fatalf("X-RateLimit: %+v", u)
	}
	// IETF t: the raised usage stops counting at the reset.
	a.Set(200, "RateLimit-Policy", `"burst";q=60;w=60`, "RateLimit", `"burst";r=0;t=8`)
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t4")
	if s := status(t, tr, "t4"); s.Rules[0].Used != 60 || s.Wait != 8*time.Second {
		t.Fatalf("IETF with t=8: %+v, want 60 used and a wait of 8s", s)
	}
	// GitHub: a 429 without Retry-After but with remaining 0 pauses until X-RateLimit-Reset.
	a.Set(429, "X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1800000040")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t5")
	if s := status(t, tr, "t5"); !s.PausedUntil.Equal(t0.Add(40*time.Second)) || s.Wait != 40*time.Second || s.Rules[1].Used != 5000 {
		t.Fatalf("429 with X-RateLimit-Reset: %+v, want paused 40s", s)
	}
	// A reset of 0 (the quota is already restored) raises nothing.
	a.Set(200, "RateLimit-Policy", `"burst";q=60;w=60`, "RateLimit", `"burst";r=0;t=0`)
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t6")
	if s := status(t, tr, "t6"); s.Rules[0].Used != 1 || s.Rules[0].Reported != 0 || s.Rules[0].ReportedAt.IsZero() || s.Wait != 0 {
		t.Fatalf("IETF with t=0: %+v, want our own 1 used and no wait", s)
	}
	// A used-up limit whose reset is longer than our window pauses until that reset.
	a.Set(200, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1800172800") // two days on
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t7")
	if s := status(t, tr, "t7"); !s.PausedUntil.Equal(t0.Add(24*time.Hour)) || s.Wait != 24*time.Hour {
		t.Fatalf("a 2-day reset on a 1-day rule: %+v, want paused for MaxPause (24 h)", s)
	}
	// Malformed fields change nothing but the request's own count.
	a.Set(200, "RateLimit-Policy", `"burst";q=60;w=`, "RateLimit", `"burst";r=x`, "X-RateLimit-Remaining", "-3", "X-MinLimit-Remaining", "many")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t3")
	if s := status(t, tr, "t3"); s.Rules[0].Used != 1 || s.Rules[1].Used != 1 || !s.Rules[0].ReportedAt.IsZero() || s.Wait != 0 {
		t.Fatalf("malformed headers: %+v", s)
	}
}

// TestSyncXRateLimitWindowAddsItsReader: XRateLimitWindow adds the X-RateLimit-* reader to the
// defaults: a 403 whose remaining is 0 pauses until its epoch reset, and a remaining count raises
// usage.
func TestSyncXRateLimitWindowAddsItsReader(t *testing.T) {
	hour := strategy.Rule{Limit: 5000, Window: time.Hour}
	c, tr, _ := syncOn(t, []strategy.Rule{hour}, WithSync(SyncConfig{XRateLimitWindow: time.Hour, XRateLimitReset: headers.ResetEpoch}))
	a := &upstreamtest.Answer{}
	srv, _ := upstreamtest.Counting(t, a.Serve)
	a.Set(200, "X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4000", "X-RateLimit-Reset", strconv.FormatInt(t0.Unix()+1200, 10))
	upstreamtest.Get(t, c, srv.URL)
	key := strings.TrimPrefix(srv.URL, "http://")
	if u := status(t, tr, key).Rules[0]; u.Used != 1000 || u.Reported != 4000 {
		t.Fatalf("after remaining 4000 of 5000: %+v, want used 1000", u)
	}
	a.Set(403, "X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(t0.Unix()+1200, 10))
	upstreamtest.Get(t, c, srv.URL)
	if s := status(t, tr, key); !s.PausedUntil.Equal(t0.Add(1200 * time.Second)) {
		t.Fatalf("403 with remaining 0: paused until %v, want the reset %v", s.PausedUntil, t0.Add(1200*time.Second))
	}
}

// TestSyncPacedWaitsOutThePause: a paced request after a 429 sleeps until the pause ends and
// is not sent before; a deadline inside the pause fails at once.
func TestSyncPacedWaitsOutThePause(t *testing.T) {
	c, tr, a, clk, _ := syncSetup(t, SyncConfig{}, WithPacing())
	srv, hits := upstreamtest.Counting(t, a.Serve)
	a.Set(429, "Retry-After", "7")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	a.Set(200)
	done := make(chan error, 1)
	go func() { _, err := upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1"); done <- err }()
	for clk.Sleepers() == 0 {
		time.Sleep(time.Millisecond)
	}
	if next, _ := clk.Next(); !next.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("paced request sleeps until %v, want t0+7s", next)
	}
	if hits.Load() != 1 {
		t.Fatalf("sent during the pause: %d hits", hits.Load())
	}
	clk.Advance(7 * time.Second)
	if err := <-done; err != nil || hits.Load() != 2 {
		t.Fatalf("after the pause: %v, %d hits", err, hits.Load())
	}
	// A deadline inside the pause fails at once.
	a.Set(429, "Retry-After", "60")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Header.Set("Xero-Tenant-Id", "t1")
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request inside a 60 s pause with a 10 s deadline: %v", err)
	}
	_ = tr
}

// TestSyncStoreErrorKeepsResponse: when the store cannot take what the response says, the
// caller still gets the response as it was, and the error handler hears of the record's and
// the sync's failures.
func TestSyncStoreErrorKeepsResponse(t *testing.T) {
	var failures atomic.Int64
	c, tr, a, _, st := syncSetup(t, SyncConfig{}, WithLogger(discard), WithErrorHandler(func(*http.Request, string, error) { failures.Add(1) }))
	srv, _ := upstreamtest.Counting(t, a.Serve)
	st.Close()
	a.Set(429, "Retry-After", "5", "X-MinLimit-Remaining", "0")
	resp, err := upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "5" {
		t.Fatalf("response after a failed sync: %v %v", resp, err)
	}
	// The record (SendUncounted) and the sync each reported their error.
	if failures.Load() != 2 {
		t.Fatalf("error handler called %d times, want 2", failures.Load())
	}
	_ = tr
}

// TestMaxPauseKeepsReset: MaxPause shortens the pause, not the reset the raise is dated by, so
// the day rule stays used up until the upstream's reset.
func TestMaxPauseKeepsReset(t *testing.T) {
	c, tr, a, clk, _ := syncSetup(t, SyncConfig{MaxPause: time.Hour})
	srv, _ := upstreamtest.Counting(t, a.Serve)
	a.Set(429, "Retry-After", "18000", "X-Rate-Limit-Problem", "day")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if s := status(t, tr, "t1"); !s.PausedUntil.Equal(t0.Add(time.Hour)) || s.Wait != 5*time.Hour {
		t.Fatalf("after a day 429 with a 5 h Retry-After and MaxPause 1 h: %+v", s)
	}
	clk.Advance(time.Hour)
	if s := status(t, tr, "t1"); s.Rules[1].Used != 5000 || s.Wait != 4*time.Hour {
		t.Fatalf("an hour later: %+v, want the day rule used up for 4 h more", s)
	}
}

// TestHugeRetryAfterPausesForMaxPause: a Retry-After far in the future pauses for MaxPause, and
// MaxPause cannot exceed what stores keep.
func TestHugeRetryAfterPausesForMaxPause(t *testing.T) {
	c, tr, a, _, _ := syncSetup(t, SyncConfig{})
	srv, _ := upstreamtest.Counting(t, a.Serve)
	a.Set(429, "Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")
	upstreamtest.Get(t, c, srv.URL, "Xero-Tenant-Id", "t1")
	if s := status(t, tr, "t1"); !s.PausedUntil.Equal(t0.Add(defaultMaxPause)) {
		t.Fatalf("paused until %v, want t0 + %v", s.PausedUntil, defaultMaxPause)
	}
	if _, err := New(nil, WithRules(minute), WithSync(SyncConfig{MaxPause: strategy.MaxWindow + 1})); err == nil {
		t.Fatal("a MaxPause above strategy.MaxWindow was accepted")
	}
}

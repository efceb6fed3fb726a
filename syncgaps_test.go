package ratemonitor

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

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

// TestSyncXRateLimitWindow: XRateLimitWindow adds the X-RateLimit-* reader to the defaults: a
// 403 whose remaining is 0 pauses until its epoch reset, and a remaining count raises usage.
func TestSyncXRateLimitWindow(t *testing.T) {
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

// TestReaderWindowMatchesNoRule: a reader given to WithSync (or WithCostReport) that declares
// a window no rule has is refused at New, naming that window and the rules; so is an app
// window without app rules, and an XRateLimitWindow no rule has. The default readers are not
// checked.
func TestReaderWindowMatchesNoRule(t *testing.T) {
	cases := []struct {
		name string
		opts []Option
		want []string
	}{
		{"xero day window", []Option{WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 10_000, Window: time.Minute}),
			WithSync(SyncConfig{Readers: []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour)}})},
			[]string{"WithSync: reader 0", "headers.XeroReader(1m0s, 24h0m0s)", "24h0m0s window", "the rules are 60/1m0s", "app rules: 10000/1m0s"}},
		{"app window without app rules", []Option{WithRules(minute, day),
			WithSync(SyncConfig{Readers: []headers.Reader{headers.Declare("app-reader", nil, headers.Window{Window: time.Minute, App: true})}})},
			[]string{"app key's 1m0s window", "no app rules", "the rules are 60/1m0s, 5000/24h0m0s", "WithAppRules"}},
		{"x-ratelimit window", []Option{WithRules(minute), WithSync(SyncConfig{XRateLimitWindow: time.Hour})},
			[]string{"WithSync: SyncConfig.XRateLimitWindow 1h0m0s", "headers.XRateLimitReader(1h0m0s, auto)", "1h0m0s window", "the rules are 60/1m0s"}},
		{"cost reader window", []Option{WithRules(minute), WithCostReport(cost.ShopifyGraphQL(20 * time.Second))},
			[]string{"WithCostReport", "cost.ShopifyGraphQL(20s)", "20s window", "the rules are 60/1m0s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := New(nil, c.opts...)
			if err == nil {
				tr.Close()
				t.Fatal("New accepted a reader whose window matches no rule")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// The defaults, over a minute rule alone, are fine; a reader of matching windows too.
	for _, opts := range [][]Option{
		{WithRules(minute), WithSync(SyncConfig{})},
		{WithRules(minute, day), WithAppRules("app", strategy.Rule{Limit: 10_000, Window: time.Minute}),
			WithSync(SyncConfig{Readers: []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour), headers.IETFReader}})},
	} {
		tr, err := New(nil, opts...)
		if err != nil {
			t.Fatalf("New refused readers whose windows are the rules': %v", err)
		}
		tr.Close()
	}
	if _, err := New(nil, WithRules(minute), WithSync(SyncConfig{Readers: []headers.Reader{headers.ReaderFunc(nil)}})); err == nil || !strings.Contains(err.Error(), "reader 0 is nil") {
		t.Fatalf("a nil ReaderFunc: %v", err)
	}
}

package ratemonitor

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestReaderWindowMatchingNoRuleRefused: a reader given to WithSync (or WithCostReport) that
// declares a window no rule has is refused at New, naming that window and the rules; so is an app
// window without app rules, and an XRateLimitWindow no rule has. The default readers are not
// checked.
func TestReaderWindowMatchingNoRuleRefused(t *testing.T) {
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

// TestWithSyncRefusesAStoreWithoutSyncAndBadConfig: New refuses WithSync over a store that
// cannot Sync, a negative Fallback or MaxPause, a nil reader, and WithAppRules without a key
// or with an invalid rule.
func TestWithSyncRefusesAStoreWithoutSyncAndBadConfig(t *testing.T) {
	_, err := New(nil, WithRules(minute), WithStore(plainStore{}), WithSync(SyncConfig{}))
	if err == nil || !errors.Is(err, errNoSyncer) {
		t.Fatalf("New over a store without Sync: %v", err)
	}
	for _, cfg := range []SyncConfig{{Fallback: -1}, {MaxPause: -time.Second}, {Readers: []headers.Reader{nil}}} {
		if _, err := New(nil, WithRules(minute), WithSync(cfg)); err == nil {
			t.Fatalf("WithSync(%+v) accepted", cfg)
		}
	}
	if _, err := New(nil, WithRules(minute), WithAppRules("")); err == nil {
		t.Fatal("WithAppRules with an empty key accepted")
	}
	if _, err := New(nil, WithRules(minute), WithAppRules("app", strategy.Rule{Limit: 0, Window: time.Minute})); !errors.Is(err, strategy.ErrInvalidRule) {
		t.Fatalf("WithAppRules with an invalid rule: %v", err)
	}
}

// plainStore is a Store without Sync.
type plainStore struct{ cache.Store }

// TestXRateLimitWindowBesideReadersRefused: SyncConfig.XRateLimitWindow beside Readers makes New
// fail (before issue 15's fix it was silently ignored).
func TestXRateLimitWindowBesideReadersRefused(t *testing.T) {
	tr, err := New(http.DefaultTransport,
		WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		WithSync(SyncConfig{Readers: []headers.Reader{headers.IETFReader}, XRateLimitWindow: time.Hour}))
	if err == nil {
		tr.Close()
		t.Errorf("New accepted XRateLimitWindow 1h0m0s beside Readers, and will never read X-RateLimit-* (nor has a 1h rule)")
	}
}

// TestXeroReaderWithoutAppRulesAccepted: headers.XeroReader is accepted without app rules, its
// app figure being optional.
func TestXeroReaderWithoutAppRulesAccepted(t *testing.T) {
	tr, err := New(nil,
		WithRules(strategy.Rule{Limit: 60, Window: time.Minute}, strategy.Rule{Limit: 5000, Window: 24 * time.Hour}),
		WithSync(SyncConfig{Readers: []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour)}}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tr.Close()
}

package headers

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestRefusedTellsLimitFromPermission(t *testing.T) {
	cases := []struct {
		status int
		h      http.Header
		want   bool
	}{
		{429, hdr(), true},
		{403, hdr("X-RateLimit-Remaining", "0"), true},
		{403, hdr("x-ratelimit-remaining", " 0 "), true},
		{403, hdr("Retry-After", "60"), true},
		{403, hdr("X-RateLimit-Remaining", "12"), false},
		{403, hdr(), false},
		{200, hdr("X-RateLimit-Remaining", "0"), false},
		{503, hdr("Retry-After", "5"), false},
	}
	for _, c := range cases {
		if got := Refused(c.status, c.h); got != c.want {
			t.Errorf("Refused(%d, %v) = %v, want %v", c.status, c.h, got, c.want)
		}
	}
}

func TestShopifyReaderReadsCallLimit(t *testing.T) {
	read := ShopifyReader(20 * time.Second)
	got := read.Read(hdr("X-Shopify-Shop-Api-Call-Limit", "32/40"), now)
	want := Signal{Window: 20 * time.Second, Remaining: 8, Limit: 40, Reset: Unknown}
	if len(got.Signals) != 1 || got.Signals[0] != want {
		t.Fatalf("32/40: %+v, want %+v", got, want)
	}
	for _, v := range []string{"", "32", "a/40", "32/-1", "-1/40", "32/40/2"} {
		if got := read.Read(hdr("X-Shopify-Shop-Api-Call-Limit", v), now); len(got.Signals) != 0 {
			t.Errorf("%q: %+v, want nothing", v, got)
		}
	}
	if got := read.Read(hdr("X-Shopify-Shop-Api-Call-Limit", "41/40"), now); got.Signals[0].Remaining != 0 {
		t.Errorf("41/40: %+v, want remaining 0", got)
	}
}

func TestHubSpotReaderReadsBothWindows(t *testing.T) {
	read := HubSpotReader(10*time.Second, 24*time.Hour)
	h := hdr("X-HubSpot-RateLimit-Max", "100", "X-HubSpot-RateLimit-Remaining", "97", "X-HubSpot-RateLimit-Interval-Milliseconds", "10000",
		"X-HubSpot-RateLimit-Daily", "250000", "X-HubSpot-RateLimit-Daily-Remaining", "249000")
	if x := parseHubSpot(h); x != (hubSpotFields{Max: 100, Remaining: 97, Interval: 10 * time.Second, Daily: 250000, DailyRemaining: 249000}) {
		t.Fatalf("parseHubSpot: %+v", x)
	}
	got := read.Read(h, now)
	want := []Signal{{Window: 10 * time.Second, Remaining: 97, Limit: 100, Reset: Unknown}, {Window: 24 * time.Hour, Remaining: 249000, Limit: 250000, Reset: Unknown}}
	if len(got.Signals) != 2 || got.Signals[0] != want[0] || got.Signals[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got.Signals, want)
	}
	// OAuth calls carry no daily fields.
	if got := read.Read(hdr("X-HubSpot-RateLimit-Max", "110", "X-HubSpot-RateLimit-Remaining", "3"), now); len(got.Signals) != 1 || got.Signals[0].Remaining != 3 {
		t.Fatalf("OAuth: %+v", got)
	}
}

func TestReadersDeclareTheirWindows(t *testing.T) {
	var _ Windowed = XeroReader(time.Minute, time.Hour)
	var _ Reader = IETFReader
	x := XeroReader(time.Minute, 24*time.Hour).Windows()
	want := []Window{{Window: time.Minute}, {Window: 24 * time.Hour}, {Window: time.Minute, App: true, Optional: true}}
	if len(x) != 3 || x[0] != want[0] || x[1] != want[1] || x[2] != want[2] {
		t.Fatalf("XeroReader windows %v, want %v", x, want)
	}
	if w := XRateLimitReader(time.Hour, ResetEpoch).Windows(); len(w) != 1 || w[0] != (Window{Window: time.Hour}) {
		t.Fatalf("XRateLimitReader windows %v", w)
	}
	if got := (Declared{}).Read(hdr("X-MinLimit-Remaining", "3"), now); len(got.Signals) != 0 {
		t.Fatalf("zero Declared read %+v", got)
	}
}

// TestParseXeroGivesTheFields: parseXero gives the fields themselves; what is absent is Unknown.
func TestParseXeroGivesTheFields(t *testing.T) {
	h := http.Header{}
	h.Set("X-MinLimit-Remaining", "42")
	h.Set("X-Rate-Limit-Problem", "Minute")
	x := parseXero(h)
	if got := fmt.Sprintf("%d %v %v", x.MinRemaining, x.DayRemaining == Unknown, x.Problem); got != "42 true minute" {
		t.Errorf("parseXero: %s, want 42 true minute", got)
	}
}

// TestParseShopifyCallLimitReadsUsedAndSize: "32/40" is 32 used of 40; anything else Unknown.
func TestParseShopifyCallLimitReadsUsedAndSize(t *testing.T) {
	c := parseShopifyCallLimit(http.Header{"X-Shopify-Shop-Api-Call-Limit": {"32/40"}})
	bad := parseShopifyCallLimit(http.Header{"X-Shopify-Shop-Api-Call-Limit": {"32 of 40"}})
	if got := fmt.Sprintf("%d %d %v", c.Used, c.Size, bad.Used == Unknown); got != "32 40 true" {
		t.Errorf("parseShopifyCallLimit: %s, want 32 40 true", got)
	}
}

// TestParseHubSpotWithoutDaily: OAuth calls have no daily limit, and so no daily fields.
func TestParseHubSpotWithoutDaily(t *testing.T) {
	fields := http.Header{}
	fields.Set("X-HubSpot-RateLimit-Max", "100")
	fields.Set("X-HubSpot-RateLimit-Remaining", "97")
	fields.Set("X-HubSpot-RateLimit-Interval-Milliseconds", "10000")
	h := parseHubSpot(fields)
	if got := fmt.Sprintf("%d %d %v %v", h.Max, h.Remaining, h.Interval, h.Daily == Unknown); got != "100 97 10s true" {
		t.Errorf("parseHubSpot: %s, want 100 97 10s true", got)
	}
}

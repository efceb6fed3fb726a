package headers

import (
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
	if x := ParseHubSpot(h); x != (HubSpot{Max: 100, Remaining: 97, Interval: 10 * time.Second, Daily: 250000, DailyRemaining: 249000}) {
		t.Fatalf("ParseHubSpot: %+v", x)
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

package headers

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// The fuzz targets check that no input panics and that every figure is either Unknown or
// within its documented range.

// maxSeconds is the largest number of seconds a time.Duration holds: the longest Retry-After.
const maxSeconds = int64((1<<63 - 1) / time.Second)

func allDigits(v string) bool { return v != "" && strings.Trim(v, "0123456789") == "" }

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "-1", "Mon, 30 Nov 2026 12:01:30 GMT", "Monday, 30-Nov-26 12:00:05 GMT", "Mon Nov 30 12:00:10 2026", "9223372037", "1e3"} {
		f.Add(s, "")
	}
	f.Add("Mon, 30 Nov 2026 12:01:30 GMT", "Mon, 30 Nov 2026 12:01:00 GMT")
	f.Add("Mon, 30 Nov 2026 12:00:05 GMT", "Thu, 01 Jan 1970 00:00:00 GMT")
	f.Fuzz(func(t *testing.T, v, date string) {
		d, ok := RetryAfter(hdr("Retry-After", v, "Date", date), now)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("RetryAfter(%q, date %q) = %v, %v", v, date, d, ok)
		}
		// A Date is used only within MaxDateSkew of now; past that the wait is from now.
		if p := headerparse.ParseRetryAfter(hdr("Retry-After", v, "Date", date), now); p.Wait != d || p.OK != ok {
			t.Fatalf("ParseRetryAfter %+v disagrees with RetryAfter %v, %v", p, d, ok)
		} else if skew := p.Date.Sub(now); p.DateIgnored && skew <= MaxDateSkew && skew >= -MaxDateSkew {
			t.Fatalf("Date %q (skew %v) ignored", date, skew)
		} else if at, err := http.ParseTime(strings.TrimSpace(v)); p.DateIgnored && err == nil && d != max(0, at.Sub(now)) {
			t.Fatalf("Date %q ignored, but the wait %v is not measured from now", date, d)
		}
		if allDigits(v) {
			want := time.Duration(maxSeconds) * time.Second
			if n, err := strconv.ParseUint(v, 10, 64); err == nil && n <= uint64(maxSeconds) {
				want = time.Duration(n) * time.Second
			}
			if !ok || d != want {
				t.Fatalf("delay-seconds %q read as %v, %v; want %v", v, d, ok, want)
			}
		}
	})
}

func FuzzParseXero(f *testing.F) {
	f.Add("59", "4999", "9999", "minute")
	f.Add("-1", "x", "", "Daily")
	f.Fuzz(func(t *testing.T, m, d, a, p string) {
		h := hdr("X-MinLimit-Remaining", m, "X-DayLimit-Remaining", d, "X-AppMinLimit-Remaining", a, "X-Rate-Limit-Problem", p)
		x := parseXero(h)
		for _, c := range []int{x.MinRemaining, x.DayRemaining, x.AppMinRemaining} {
			if c < Unknown {
				t.Fatalf("count %d below Unknown in %+v", c, x)
			}
		}
		for _, s := range XeroReader(time.Minute, 24*time.Hour).Read(h, now).Signals {
			if s.Remaining < 0 {
				t.Fatalf("signal with remaining %d", s.Remaining)
			}
		}
	})
}

func FuzzParseIETF(f *testing.F) {
	f.Add(`"burst";q=100;w=60, "daily";q=1000;w=86400`, `"burst";r=40;t=12`)
	f.Add(`a;q=1`, `a;r=-1`)
	f.Add(`"a";q=1;w=`, `limit=100, remaining=50`)
	f.Fuzz(func(t *testing.T, policy, state string) {
		h := http.Header{}
		h.Set("RateLimit-Policy", policy)
		h.Set("RateLimit", state)
		for _, p := range ParseIETF(h) {
			if p.Quota < Unknown || p.Remaining < Unknown || p.Window < 0 || p.Reset < Unknown {
				t.Fatalf("out of range: %+v", p)
			}
		}
		for _, s := range IETFReader(h, now).Signals {
			if s.Remaining < 0 || s.Window <= 0 {
				t.Fatalf("bad signal %+v", s)
			}
		}
	})
}

func FuzzParseXRateLimit(f *testing.F) {
	f.Add("5000", "4987", "1796040090", 0)
	f.Add("x", "-1", "42", 2)
	f.Fuzz(func(t *testing.T, l, r, reset string, mode int) {
		x := headerparse.ParseXRateLimit(hdr("X-RateLimit-Limit", l, "X-RateLimit-Remaining", r, "X-RateLimit-Reset", reset), now, headerparse.ResetMode(mode%3))
		if x.Limit < Unknown || x.Remaining < Unknown || x.Reset < Unknown {
			t.Fatalf("out of range: %+v", x)
		}
	})
}

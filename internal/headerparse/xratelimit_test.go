package headerparse

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestParseXRateLimitTellsEpochFromDelta(t *testing.T) {
	epoch := now.Add(90 * time.Second).Unix()
	cases := []struct {
		name string
		h    http.Header
		mode ResetMode
		want XRateLimit
	}{
		{"absent", hdr(), ResetAuto, XRateLimit{Unknown, Unknown, Unknown}},
		{"GitHub epoch, auto", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4987", "X-RateLimit-Reset", itoa(epoch)), ResetAuto, XRateLimit{5000, 4987, 90 * time.Second}},
		{"delta, auto", hdr("X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "42"), ResetAuto, XRateLimit{Unknown, 3, 42 * time.Second}},
		{"epoch just passed is a second away", hdr("X-RateLimit-Reset", itoa(now.Unix()-10)), ResetAuto, XRateLimit{Unknown, Unknown, ResetResolution}},
		{"epoch passed by the skew bound is 0", hdr("X-RateLimit-Reset", itoa(now.Add(-MaxDateSkew).Unix())), ResetEpoch, XRateLimit{Unknown, Unknown, 0}},
		{"epoch from Date: the upstream's clock 3 s behind", hdr("X-RateLimit-Reset", itoa(now.Unix()-1), "Date", now.Add(-3*time.Second).Format(http.TimeFormat)), ResetEpoch, XRateLimit{Unknown, Unknown, 2 * time.Second}},
		{"epoch from Date: the upstream's clock 30 s ahead", hdr("X-RateLimit-Reset", itoa(now.Unix()+60), "Date", now.Add(30*time.Second).Format(http.TimeFormat)), ResetEpoch, XRateLimit{Unknown, Unknown, 30 * time.Second}},
		{"epoch at Date's second is a second away", hdr("X-RateLimit-Reset", itoa(now.Unix()+5), "Date", now.Add(5*time.Second).Format(http.TimeFormat)), ResetEpoch, XRateLimit{Unknown, Unknown, ResetResolution}},
		{"Date beyond the skew bound is not used", hdr("X-RateLimit-Reset", itoa(now.Unix()+60), "Date", now.Add(-MaxDateSkew-time.Second).Format(http.TimeFormat)), ResetEpoch, XRateLimit{Unknown, Unknown, time.Minute}},
		{"unreadable Date is not used", hdr("X-RateLimit-Reset", itoa(now.Unix()+60), "Date", "yesterday"), ResetEpoch, XRateLimit{Unknown, Unknown, time.Minute}},
		{"forced epoch on a small value", hdr("X-RateLimit-Reset", "42"), ResetEpoch, XRateLimit{Unknown, Unknown, 0}},
		{"forced delta on a large value", hdr("X-RateLimit-Reset", "1000000000"), ResetDelta, XRateLimit{Unknown, Unknown, 1_000_000_000 * time.Second}},
		{"threshold is epoch", hdr("X-RateLimit-Reset", "1000000000"), ResetAuto, XRateLimit{Unknown, Unknown, 0}},
		{"just below threshold is delta", hdr("X-RateLimit-Reset", "999999999"), ResetAuto, XRateLimit{Unknown, Unknown, 999_999_999 * time.Second}},
		{"unreadable", hdr("X-RateLimit-Limit", "5k", "X-RateLimit-Remaining", "-2", "X-RateLimit-Reset", "tomorrow"), ResetAuto, XRateLimit{Unknown, Unknown, Unknown}},
		{"huge epoch", hdr("X-RateLimit-Reset", "9223372036"), ResetEpoch, XRateLimit{Unknown, Unknown, Unknown}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseXRateLimit(c.h, now, c.mode); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

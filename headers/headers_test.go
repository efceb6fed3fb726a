package headers

import (
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestRetryAfterReadsSecondsAndDates(t *testing.T) {
	cases := []struct {
		name string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"absent", hdr(), 0, false},
		{"delay-seconds", hdr("Retry-After", "120"), 120 * time.Second, true},
		{"zero", hdr("Retry-After", "0"), 0, true},
		{"spaces around", hdr("Retry-After", " 7 "), 7 * time.Second, true},
		{"IMF-fixdate", hdr("Retry-After", "Mon, 30 Nov 2026 12:01:30 GMT"), 90 * time.Second, true},
		{"RFC 850", hdr("Retry-After", "Monday, 30-Nov-26 12:00:05 GMT"), 5 * time.Second, true},
		{"asctime", hdr("Retry-After", "Mon Nov 30 12:00:10 2026"), 10 * time.Second, true},
		{"date in the past", hdr("Retry-After", "Mon, 30 Nov 2026 11:59:00 GMT"), 0, true},
		{"date measured from Date", hdr("Retry-After", "Mon, 30 Nov 2026 12:01:30 GMT", "Date", "Mon, 30 Nov 2026 12:01:00 GMT"), 30 * time.Second, true},
		{"unreadable Date ignored", hdr("Retry-After", "Mon, 30 Nov 2026 12:01:30 GMT", "Date", "soon"), 90 * time.Second, true},
		{"negative", hdr("Retry-After", "-5"), 0, false},
		{"plus sign", hdr("Retry-After", "+5"), 0, false},
		{"fraction", hdr("Retry-After", "1.5"), 0, false},
		{"words", hdr("Retry-After", "soon"), 0, false},
		{"longer than a Duration", hdr("Retry-After", "9223372037"), 9223372036 * time.Second, true},
		{"far too long", hdr("Retry-After", "99999999999999999999999"), 9223372036 * time.Second, true},
		{"largest", hdr("Retry-After", "9223372036"), 9223372036 * time.Second, true},
		{"empty", hdr("Retry-After", ""), 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := RetryAfter(c.h, now)
			if got != c.want || ok != c.ok {
				t.Fatalf("RetryAfter(%v) = %v, %v; want %v, %v", c.h, got, ok, c.want, c.ok)
			}
		})
	}
}

// TestRetryAfterDateTrustedWithinMaxSkew: an HTTP-date is measured from the response's Date only
// while that Date is within MaxDateSkew of now (the bounds included); further off either way, from
// now, with DateIgnored set. Delay-seconds never look at Date.
func TestRetryAfterDateTrustedWithinMaxSkew(t *testing.T) {
	at := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	epoch := "Thu, 01 Jan 1970 00:00:00 GMT"
	cases := []struct {
		name string
		h    http.Header
		want headerparse.RetryAfterField
	}{
		{"Date 1970", hdr("Retry-After", at(5*time.Second), "Date", epoch),
			headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true, Date: time.Unix(0, 0).UTC(), DateIgnored: true}},
		{"Date 30 s ahead", hdr("Retry-After", at(35*time.Second), "Date", at(30*time.Second)),
			headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true, Date: now.Add(30 * time.Second)}},
		{"Date 30 s behind", hdr("Retry-After", at(-25*time.Second), "Date", at(-30*time.Second)),
			headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true, Date: now.Add(-30 * time.Second)}},
		{"Date MaxDateSkew ahead", hdr("Retry-After", at(MaxDateSkew+5*time.Second), "Date", at(MaxDateSkew)),
			headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true, Date: now.Add(MaxDateSkew)}},
		{"Date MaxDateSkew behind", hdr("Retry-After", at(-MaxDateSkew+5*time.Second), "Date", at(-MaxDateSkew)),
			headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true, Date: now.Add(-MaxDateSkew)}},
		{"Date 1 s past MaxDateSkew ahead", hdr("Retry-After", at(MaxDateSkew+6*time.Second), "Date", at(MaxDateSkew+time.Second)),
			headerparse.RetryAfterField{Wait: MaxDateSkew + 6*time.Second, OK: true, Date: now.Add(MaxDateSkew + time.Second), DateIgnored: true}},
		{"Date 1 s past MaxDateSkew behind", hdr("Retry-After", at(5*time.Second), "Date", at(-MaxDateSkew-time.Second)),
			headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true, Date: now.Add(-MaxDateSkew - time.Second), DateIgnored: true}},
		{"Date a day ahead", hdr("Retry-After", at(7*time.Second), "Date", at(24*time.Hour)),
			headerparse.RetryAfterField{Wait: 7 * time.Second, OK: true, Date: now.Add(24 * time.Hour), DateIgnored: true}},
		{"delay-seconds with Date 1970", hdr("Retry-After", "5", "Date", epoch), headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true}},
		{"unreadable Date", hdr("Retry-After", at(5*time.Second), "Date", "soon"), headerparse.RetryAfterField{Wait: 5 * time.Second, OK: true}},
		{"unreadable Retry-After with Date 1970", hdr("Retry-After", "soon", "Date", epoch), headerparse.RetryAfterField{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := headerparse.ParseRetryAfter(c.h, now)
			if got.Wait != c.want.Wait || got.OK != c.want.OK || !got.Date.Equal(c.want.Date) || got.DateIgnored != c.want.DateIgnored {
				t.Fatalf("ParseRetryAfter(%v) = %+v; want %+v", c.h, got, c.want)
			}
			if w, ok := RetryAfter(c.h, now); w != c.want.Wait || ok != c.want.OK {
				t.Fatalf("RetryAfter(%v) = %v, %v; want %v, %v", c.h, w, ok, c.want.Wait, c.want.OK)
			}
		})
	}
	// Xero's reader measures a minute problem's reset the same way.
	h := hdr("Retry-After", at(5*time.Second), "Date", epoch, "X-Rate-Limit-Problem", "minute")
	if sig := XeroReader(time.Minute, 24*time.Hour).Read(h, now).Signals; len(sig) != 1 || sig[0].Reset != 5*time.Second || sig[0].Remaining != 0 {
		t.Fatalf("Xero minute problem dated 1970: %+v, want one signal, remaining 0, reset 5s", sig)
	}
}

func TestParseXeroReadsRemainingAndProblem(t *testing.T) {
	cases := []struct {
		h    http.Header
		want xeroFields
	}{
		{hdr(), xeroFields{Unknown, Unknown, Unknown, noProblem}},
		{hdr("X-MinLimit-Remaining", "59", "X-DayLimit-Remaining", "4999", "X-AppMinLimit-Remaining", "9999"), xeroFields{59, 4999, 9999, noProblem}},
		{hdr("X-MinLimit-Remaining", "0", "X-Rate-Limit-Problem", "minute"), xeroFields{0, Unknown, Unknown, minuteProblem}},
		{hdr("X-Rate-Limit-Problem", "Minute"), xeroFields{Unknown, Unknown, Unknown, minuteProblem}},
		{hdr("X-Rate-Limit-Problem", "day"), xeroFields{Unknown, Unknown, Unknown, dayProblem}},
		{hdr("X-Rate-Limit-Problem", "Daily"), xeroFields{Unknown, Unknown, Unknown, dayProblem}},
		{hdr("X-Rate-Limit-Problem", "AppMinute"), xeroFields{Unknown, Unknown, Unknown, appMinuteProblem}},
		{hdr("X-Rate-Limit-Problem", "concurrent"), xeroFields{Unknown, Unknown, Unknown, otherProblem}},
		{hdr("X-MinLimit-Remaining", "-1", "X-DayLimit-Remaining", "lots", "X-AppMinLimit-Remaining", "99999999999"), xeroFields{Unknown, Unknown, Unknown, noProblem}},
	}
	for _, c := range cases {
		if got := parseXero(c.h); got != c.want {
			t.Errorf("parseXero(%v) = %+v, want %+v", c.h, got, c.want)
		}
	}
}

// TestXeroReaderSignalsEachWindow: the minute, day and app-minute figures are one signal each;
// a problem field uses up the rule it names (a day problem the day rule, not the minute), and
// an app-minute problem is the app key's, with the Retry-After of the app's minute.
func TestXeroReaderSignalsEachWindow(t *testing.T) {
	read := XeroReader(time.Minute, 24*time.Hour)
	for _, c := range []struct {
		name string
		h    http.Header
		want Report
	}{
		{"remaining of each window", hdr("X-MinLimit-Remaining", "12", "X-DayLimit-Remaining", "4000", "X-AppMinLimit-Remaining", "9000"),
			Report{Signals: []Signal{
				{Window: time.Minute, Remaining: 12, Limit: Unknown, Reset: Unknown},
				{Window: 24 * time.Hour, Remaining: 4000, Limit: Unknown, Reset: Unknown},
				{App: true, Window: time.Minute, Remaining: 9000, Limit: Unknown, Reset: Unknown},
			}}},
		{"day problem", hdr("X-MinLimit-Remaining", "40", "X-Rate-Limit-Problem", "Daily"),
			Report{Signals: []Signal{
				{Window: time.Minute, Remaining: 40, Limit: Unknown, Reset: Unknown},
				{Window: 24 * time.Hour, Remaining: 0, Limit: Unknown, Reset: Unknown},
			}}},
		{"app problem", hdr("X-MinLimit-Remaining", "40", "X-Rate-Limit-Problem", "appminute", "Retry-After", "9"),
			Report{App: true, Signals: []Signal{
				{Window: time.Minute, Remaining: 40, Limit: Unknown, Reset: Unknown},
				{App: true, Window: time.Minute, Remaining: 0, Limit: Unknown, Reset: 9 * time.Second},
			}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := read.Read(c.h, now); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s: got %+v\nwant %+v", c.name, got, c.want)
			}
		})
	}
}

func TestParseIETFReadsPolicies(t *testing.T) {
	cases := []struct {
		name string
		h    http.Header
		want []Policy
	}{
		{"absent", hdr(), nil},
		{"two policies", hdr(
			"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=40;t=12, "daily";r=998`),
			[]Policy{
				{Name: "burst", Quota: 100, Window: time.Minute, Remaining: 40, Reset: 12 * time.Second},
				{Name: "daily", Quota: 1000, Window: 24 * time.Hour, Remaining: 998, Reset: Unknown},
			}},
		{"split over field lines, token names, extra params", hdr(
			"RateLimit-Policy", `default;q=10;w=1;qu="requests"`,
			"RateLimit-Policy", `other;q=5;pk=:cHsdsRa894==:`,
			"RateLimit", `default;r=0;t=1`),
			[]Policy{
				{Name: "default", Quota: 10, Unit: "requests", Window: time.Second, Remaining: 0, Reset: time.Second},
				{Name: "other", Quota: 5, Partition: "\x70\x7b\x1d\xb1\x16\xbc\xf7", Remaining: Unknown, Reset: Unknown},
			}},
		{"RateLimit alone", hdr("RateLimit", `"x";r=3`), []Policy{{Name: "x", Quota: Unknown, Remaining: 3, Reset: Unknown}}},
		{"malformed policy field ignored", hdr("RateLimit-Policy", `"a";q=1;w=`, "RateLimit", `"a";r=0`),
			[]Policy{{Name: "a", Quota: Unknown, Remaining: 0, Reset: Unknown}}},
		{"members without required param or with bad values skipped", hdr(
			"RateLimit-Policy", `"a";w=60, "b";q=-1, "c";q=1.5, "d";q=?1, 7;q=3, ("e");q=4, "f";q=2`,
			"RateLimit", `"f";t=3`),
			[]Policy{{Name: "f", Quota: 2, Remaining: Unknown, Reset: Unknown}}},
		{"old dictionary draft ignored", hdr("RateLimit", `limit=100, remaining=50, reset=5`), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseIETF(c.h); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestIETFReaderSignalsWindowedPolicies: a policy with a window is a signal (with its reset when
// t is given); one without a window is none.
func TestIETFReaderSignalsWindowedPolicies(t *testing.T) {
	for _, c := range []struct {
		name string
		h    http.Header
		want Report
	}{
		{"without t", hdr("RateLimit-Policy", `"minute";q=60;w=60, "nowindow";q=5`, "RateLimit", `"minute";r=7, "nowindow";r=1`),
			Report{Signals: []Signal{{Window: time.Minute, Remaining: 7, Limit: 60, Reset: Unknown}}}},
		{"with t", hdr("RateLimit-Policy", `"minute";q=60;w=60`, "RateLimit", `"minute";r=0;t=13`),
			Report{Signals: []Signal{{Window: time.Minute, Remaining: 0, Limit: 60, Reset: 13 * time.Second}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := IETFReader(c.h, now); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s: got %+v, want %+v", c.name, got, c.want)
			}
		})
	}
}

// TestXRateLimitReaderNeedsRemaining: the remaining field makes a signal (with the limit and
// the reset when given); without it there is none.
func TestXRateLimitReaderNeedsRemaining(t *testing.T) {
	read := XRateLimitReader(time.Hour, ResetEpoch)
	for _, c := range []struct {
		name string
		h    http.Header
		want Report
	}{
		{"limit and remaining", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "10"),
			Report{Signals: []Signal{{Window: time.Hour, Remaining: 10, Limit: 5000, Reset: Unknown}}}},
		{"with reset", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(now.Unix()+25, 10)),
			Report{Signals: []Signal{{Window: time.Hour, Remaining: 0, Limit: Unknown, Reset: 25 * time.Second}}}},
		{"no remaining", hdr("X-RateLimit-Limit", "5000"), Report{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := read.Read(c.h, now); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s: got %+v, want %+v", c.name, got, c.want)
			}
		})
	}
}

// TestFieldNamesAreCanonical: every field name the readers look up is in canonical form, so that
// http.Header.Get does not allocate to canonicalize it.
func TestFieldNamesAreCanonical(t *testing.T) {
	for _, f := range []string{fieldRetryAfter, fieldDate, fieldMinRemaining, fieldDayRemaining, fieldAppMinRemaining,
		fieldProblem, fieldPolicy, fieldRateLimit, fieldXLimit, fieldXRemaining, fieldXReset,
		fieldShopifyCallLimit, fieldHubSpotMax, fieldHubSpotRemaining, fieldHubSpotInterval, fieldHubSpotDaily, fieldHubSpotDailyRemaining} {
		if c := http.CanonicalHeaderKey(f); c != f {
			t.Errorf("%q is not canonical (%q): every lookup would allocate", f, c)
		}
	}
}

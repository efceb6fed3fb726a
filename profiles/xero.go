package profiles

import (
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Xero's limits. Source: Xero, "OAuth 2.0 API limits",
// https://developer.xero.com/documentation/guides/oauth2/limits/#api-rate-limits: per tenant
// (organisation) 60 calls a minute, 5000 a day and 5 in progress at once; per app 10 000 calls a
// minute across all tenants. Xero counts the day in "a fixed window which will reset at
// different times for each tenant" (its page); the rules here are rolling windows, which never
// allow more than a fixed window of the same length does in any span of that length, and the
// day is marked fixed (SyncConfig.Fixed) so that a tenant resumes at the reset Xero reports.
const (
	xeroMinuteLimit    = 60
	xeroDayLimit       = 5000
	xeroInFlight       = 5
	xeroAppMinuteLimit = 10_000
)

// Xero paces a Xero API client: requests are keyed by their Xero-Tenant-Id header (without one,
// by their host), each tenant held to 60 a minute, 5000 a day and 5 calls in progress, and
// every request also counted under appKey (one no tenant id can be, such as
// "xero-app:<client id>") against the app's 10 000 a minute. The minute rules keep a 1 s
// margin, the day rule 1 min (24m1s buckets, at most 61 a tenant on every store). It reads
// X-MinLimit-Remaining, X-DayLimit-Remaining and X-AppMinLimit-Remaining, and a 429 pauses the
// tenant or the app key (1 s without Retry-After). Once the day is used up, one call a minute
// asks Xero when it resets (the Retry-After of its day 429), and the tenant resumes then. The store must hold leases (cache.Leaser:
// the memory and Redis stores). Source: Xero, "OAuth 2.0 API limits".
// See docs/profiles.md#xero.
func Xero(appKey string) Profile {
	if appKey == "" {
		return failed("profiles.Xero", `Xero(""): the app key must not be empty: give one no tenant id can be, such as "xero-app:<client id>"`)
	}
	return Profile{
		Name: "profiles.Xero",
		Key:  ratemonitor.KeyByHeader("Xero-Tenant-Id", nil),
		Rules: []strategy.Rule{
			{Limit: xeroMinuteLimit, Window: time.Minute, Margin: time.Second},
			{Limit: xeroDayLimit, Window: 24 * time.Hour, Margin: time.Minute}},
		Meters: []ratemonitor.Meter{{Name: "app", AppKey: appKey,
			Rules: []strategy.Rule{{Limit: xeroAppMinuteLimit, Window: time.Minute, Margin: time.Second}}}},
		InFlight: xeroInFlight,
		// Fallback: Xero sends Retry-After with its minute and day 429s; the one without is
		// the concurrent limit's (X-Rate-Limit-Problem: concurrent), where a slot frees as soon
		// as a call in progress ends: a second, not the default minute.
		// Fixed: Xero's day is a fixed window that resets at an instant of the tenant's own,
		// which only the Retry-After of a day 429 tells: once X-DayLimit-Remaining says 0, one
		// call a minute asks, and the tenant resumes at the reset that call's 429 gives,
		// rather than a day after its calls as the rolling day rule would hold it.
		Sync: &ratemonitor.SyncConfig{Readers: []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour)}, Fallback: time.Second,
			Fixed: map[time.Duration]time.Duration{24 * time.Hour: time.Minute}},
		Pacing: true,
	}
}

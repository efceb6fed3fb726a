package profiles

import (
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// HubSpot's limits for a private app on a Free or Starter account: 100 requests every 10
// seconds and 250 000 a day. Source: HubSpot, "API usage guidelines and limits",
// https://developers.hubspot.com/docs/developer-tooling/platform/usage-guidelines (other plans and
// OAuth apps have other figures: copy this profile with them).
const (
	hubSpotTenSecondLimit = 100
	hubSpotDayLimit       = 250_000
)

// HubSpot paces a HubSpot API client: requests are keyed by their token (a digest of the
// Authorization header: HubSpot counts per account, and a token belongs to one), each held to
// 100 every 10 s with a 200 ms margin, and 250 000 a day with a 1 min margin (a whole minute,
// as Xero's: the default granularity is then 24m1s, 61 buckets a key on every store; see Xero).
//
// It reads X-HubSpot-RateLimit-Max and -Remaining for the 10 s rule and
// X-HubSpot-RateLimit-Daily and -Daily-Remaining for the day rule (headers.HubSpotReader).
// HubSpot's 429 names the limit in its JSON body (policyName); when it sends no Retry-After,
// the pause is the fallback, 10 s, one interval. HubSpot resets the day at midnight in the
// account's time zone; the day rule here is a rolling 24 h, which is stricter, except on a
// 25-hour day (daylight saving ends), when two bursts 24 h apart can fall in one HubSpot day. HubSpot
// counts per account: two tokens of one account are counted apart here, so give them one key
// (WithKeyFunc) if you use several.
func HubSpot() Profile {
	return Profile{
		Name: "profiles.HubSpot",
		Key:  byCredential,
		Rules: []strategy.Rule{
			{Limit: hubSpotTenSecondLimit, Window: 10 * time.Second, Granularity: 100 * time.Millisecond, Margin: 200 * time.Millisecond},
			// The day in the default 24m1s buckets, as Xero's (see Xero): 61 a key.
			{Limit: hubSpotDayLimit, Window: 24 * time.Hour, Margin: time.Minute}},
		Sync: &ratemonitor.SyncConfig{
			Readers:  []headers.Reader{headers.HubSpotReader(10*time.Second, 24*time.Hour)},
			Fallback: 10 * time.Second,
		},
		Pacing: true,
	}
}

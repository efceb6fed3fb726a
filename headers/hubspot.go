package headers

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// hubSpotFields is what a HubSpot API response says about its limits. Source: HubSpot, "API usage
// guidelines and limits", https://developers.hubspot.com/docs/developer-tooling/platform/usage-guidelines,
// and the changelog "Rate limit information headers will be included in HTTP responses"
// (2018-11-06). The daily fields are absent from calls authenticated with OAuth, which have no
// daily limit.
type hubSpotFields struct {
	Max            int           // X-HubSpot-RateLimit-Max: requests allowed per interval, or Unknown
	Remaining      int           // X-HubSpot-RateLimit-Remaining: left in this interval, or Unknown
	Interval       time.Duration // X-HubSpot-RateLimit-Interval-Milliseconds; 0 when absent
	Daily          int           // X-HubSpot-RateLimit-Daily, or Unknown
	DailyRemaining int           // X-HubSpot-RateLimit-Daily-Remaining, or Unknown
}

// parseHubSpot reads HubSpot's X-HubSpot-RateLimit-* fields from h; what is absent or not a
// whole non-negative number is Unknown (Interval: 0).
func parseHubSpot(h http.Header) hubSpotFields {
	x := hubSpotFields{
		Max:            headerparse.Count(h, fieldHubSpotMax),
		Remaining:      headerparse.Count(h, fieldHubSpotRemaining),
		Daily:          headerparse.Count(h, fieldHubSpotDaily),
		DailyRemaining: headerparse.Count(h, fieldHubSpotDailyRemaining),
	}
	if ms := headerparse.Count(h, fieldHubSpotInterval); ms > 0 {
		x.Interval = time.Duration(ms) * time.Millisecond
	}
	return x
}

// HubSpotReader returns a Reader of HubSpot's fields for rules whose windows are interval (10 s
// at HubSpot) and day: X-HubSpot-RateLimit-Remaining is about the request's key's interval
// rule, with X-HubSpot-RateLimit-Max as the limit, and X-HubSpot-RateLimit-Daily-Remaining its
// day rule (HubSpot resets it at midnight in the account's time zone, which the response does
// not say: no reset). It declares those two windows.
func HubSpotReader(interval, day time.Duration) Declared {
	read := func(h http.Header, _ time.Time) Report {
		x := parseHubSpot(h)
		var r Report
		if x.Remaining != Unknown {
			r.Signals = append(r.Signals, Signal{Window: interval, Remaining: x.Remaining, Limit: x.Max, Reset: Unknown})
		}
		if x.DailyRemaining != Unknown {
			r.Signals = append(r.Signals, Signal{Window: day, Remaining: x.DailyRemaining, Limit: x.Daily, Reset: Unknown})
		}
		return r
	}
	return Declare(fmt.Sprintf("headers.HubSpotReader(%v, %v)", interval, day), read,
		Window{Window: interval}, Window{Window: day})
}

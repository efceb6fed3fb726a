package headers

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// problem is the limit a Xero 429 names in its X-Rate-Limit-Problem field.
type problem int

const (
	// noProblem: the field is absent.
	noProblem problem = iota
	// minuteProblem: the tenant's 60 calls per minute ("minute", "Minute").
	minuteProblem
	// dayProblem: the tenant's 5000 calls per day ("day", "Day", "daily", "Daily").
	dayProblem
	// appMinuteProblem: the app's 10 000 calls per minute across all tenants ("appminute",
	// "AppMinute").
	appMinuteProblem
	// otherProblem: any other value, such as "concurrent" (5 calls in flight per tenant).
	otherProblem
)

// String returns the canonical lowercase name Xero uses, or "" for noProblem.
func (p problem) String() string {
	switch p {
	case noProblem:
		return ""
	case minuteProblem:
		return "minute"
	case dayProblem:
		return "day"
	case appMinuteProblem:
		return "appminute"
	}
	return "other"
}

// xeroFields is what a Xero API response says about its limits. Source: developer.xero.com, "OAuth
// 2.0 API limits": per tenant 60 calls a minute and 5000 a day, per app 10 000 a minute.
type xeroFields struct {
	MinRemaining    int     // X-MinLimit-Remaining: the tenant's minute allowance left, or Unknown
	DayRemaining    int     // X-DayLimit-Remaining: the tenant's day allowance left, or Unknown
	AppMinRemaining int     // X-AppMinLimit-Remaining: the app's minute allowance left, or Unknown
	Problem         problem // X-Rate-Limit-Problem, compared case-insensitively
}

// parseXero reads Xero's rate-limit fields from h. Counts that are absent, negative or not
// whole numbers are Unknown.
func parseXero(h http.Header) xeroFields {
	x := xeroFields{
		MinRemaining:    headerparse.Count(h, fieldMinRemaining),
		DayRemaining:    headerparse.Count(h, fieldDayRemaining),
		AppMinRemaining: headerparse.Count(h, fieldAppMinRemaining),
	}
	switch p := strings.ToLower(strings.TrimSpace(h.Get(fieldProblem))); p {
	case "":
	case "minute":
		x.Problem = minuteProblem
	case "day", "daily":
		x.Problem = dayProblem
	case "appminute", "app-minute", "app minute":
		x.Problem = appMinuteProblem
	default:
		x.Problem = otherProblem
	}
	return x
}

// XeroReader returns a Reader of Xero's fields for rules whose windows are minute and day:
// time.Minute and 24*time.Hour against the real API, shorter against a stand-in that compresses
// time. X-MinLimit-Remaining is about the request's key's minute rule, X-DayLimit-Remaining
// its day rule, and X-AppMinLimit-Remaining the app key's minute rule. A problem names a rule
// as used up (remaining 0) until the response's Retry-After (Signal.Reset): "minute" and
// "day" the key's, "appminute" the app's, which also sets Report.App.
//
// It declares the windows minute and day of the request's key and minute of the app key, that
// last one optional: without app rules (ratemonitor.WithAppRules) the app figure is dropped.
func XeroReader(minute, day time.Duration) Declared {
	read := func(h http.Header, now time.Time) Report {
		x := parseXero(h)
		var r Report // Signals made at the first figure: a response without any allocates nothing
		resets := [3]time.Duration{Unknown, Unknown, Unknown}
		if x.Problem != noProblem && x.Problem != otherProblem {
			if d, ok := RetryAfter(h, now); ok {
				resets[x.Problem-minuteProblem] = d
			}
		}
		add := func(app bool, w time.Duration, remaining int, reset time.Duration) {
			if remaining != Unknown {
				if r.Signals == nil {
					r.Signals = make([]Signal, 0, 3)
				}
				r.Signals = append(r.Signals, Signal{App: app, Window: w, Remaining: remaining, Limit: Unknown, Reset: reset})
			}
		}
		mr, dr, ar := x.MinRemaining, x.DayRemaining, x.AppMinRemaining
		switch x.Problem {
		case minuteProblem:
			mr = 0
		case dayProblem:
			dr = 0
		case appMinuteProblem:
			ar, r.App = 0, true
		}
		add(false, minute, mr, resets[0])
		add(false, day, dr, resets[1])
		add(true, minute, ar, resets[2])
		return r
	}
	return Declare(fmt.Sprintf("headers.XeroReader(%v, %v)", minute, day), read,
		Window{Window: minute}, Window{Window: day}, Window{Window: minute, App: true, Optional: true})
}

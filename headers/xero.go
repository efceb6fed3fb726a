package headers

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Problem is the limit a Xero 429 names in its X-Rate-Limit-Problem field.
type Problem int

const (
	// NoProblem: the field is absent.
	NoProblem Problem = iota
	// MinuteProblem: the tenant's 60 calls per minute ("minute", "Minute").
	MinuteProblem
	// DayProblem: the tenant's 5000 calls per day ("day", "Day", "daily", "Daily").
	DayProblem
	// AppMinuteProblem: the app's 10 000 calls per minute across all tenants ("appminute",
	// "AppMinute").
	AppMinuteProblem
	// OtherProblem: any other value, such as "concurrent" (5 calls in flight per tenant).
	OtherProblem
)

// String returns the canonical lowercase name Xero uses, or "" for NoProblem.
func (p Problem) String() string {
	switch p {
	case NoProblem:
		return ""
	case MinuteProblem:
		return "minute"
	case DayProblem:
		return "day"
	case AppMinuteProblem:
		return "appminute"
	}
	return "other"
}

// Xero is what a Xero API response says about its limits. Source: developer.xero.com, "OAuth
// 2.0 API limits": per tenant 60 calls a minute and 5000 a day, per app 10 000 a minute.
type Xero struct {
	MinRemaining    int     // X-MinLimit-Remaining: the tenant's minute allowance left, or Unknown
	DayRemaining    int     // X-DayLimit-Remaining: the tenant's day allowance left, or Unknown
	AppMinRemaining int     // X-AppMinLimit-Remaining: the app's minute allowance left, or Unknown
	Problem         Problem // X-Rate-Limit-Problem, compared case-insensitively
}

// ParseXero reads Xero's rate-limit fields from h. Counts that are absent, negative or not
// whole numbers are Unknown.
func ParseXero(h http.Header) Xero {
	x := Xero{
		MinRemaining:    count(h, fieldMinRemaining),
		DayRemaining:    count(h, fieldDayRemaining),
		AppMinRemaining: count(h, fieldAppMinRemaining),
	}
	switch p := strings.ToLower(strings.TrimSpace(h.Get(fieldProblem))); p {
	case "":
	case "minute":
		x.Problem = MinuteProblem
	case "day", "daily":
		x.Problem = DayProblem
	case "appminute", "app-minute", "app minute":
		x.Problem = AppMinuteProblem
	default:
		x.Problem = OtherProblem
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
		x := ParseXero(h)
		var r Report // Signals made at the first figure: a response without any allocates nothing
		resets := [3]time.Duration{Unknown, Unknown, Unknown}
		if x.Problem != NoProblem && x.Problem != OtherProblem {
			if d, ok := RetryAfter(h, now); ok {
				resets[x.Problem-MinuteProblem] = d
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
		case MinuteProblem:
			mr = 0
		case DayProblem:
			dr = 0
		case AppMinuteProblem:
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

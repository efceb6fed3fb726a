package headers

import "time"

// Report is what one response says about the limits the request was counted under, with each
// figure tied to the rule it is about.
type Report struct {
	// Signals are the figures the response gave, one per rule.
	Signals []Signal
	// App is true when the response refused the request because of an app-wide limit (Xero's
	// X-Rate-Limit-Problem: appminute): a pause then applies to the app key, not the
	// request's own key.
	App bool
}

// Signal is the upstream's word on one rule.
type Signal struct {
	// App is true when the figure is about the app-wide key shared by every key
	// (ratemonitor.WithAppRules), false when it is about the request's own key.
	App bool
	// Window names the rule: the first rule of that key whose Window equals it.
	Window time.Duration
	// Remaining is how many more requests the upstream will accept in that rule's window;
	// never Unknown in a Report.
	Remaining int
	// Limit is the upstream's own limit for that window when the response said it, and
	// Unknown otherwise (the rule's Limit is then taken as the upstream's).
	Limit int
	// Reset is how long until the upstream frees the usage it reports (IETF t,
	// X-RateLimit-Reset, or a 429's Retry-After for the limit it names): 0 when it is
	// already freed, Unknown (-1ns) when the response did not say.
	Reset time.Duration
}

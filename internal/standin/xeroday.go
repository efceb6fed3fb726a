package standin

import "time"

// The day of a Xero tenant. Xero's page (https://developer.xero.com/documentation/guides/oauth2/limits/)
// counts the day limit in "a fixed window which will reset at different times for each
// tenant", and answers a call over it with a 429 whose Retry-After says when that window resets
// and whose X-Rate-Limit-Problem is "day"; no other answer says when the day resets (only
// X-DayLimit-Remaining, how many are left). The stand-in's tenant day starts at an offset of
// its own (tenant), so its reset is an instant the client cannot know beforehand.

// DayEnds returns when the day window of tenant that holds at ends: its calls count no more
// from then on.
func (x *Xero) DayEnds(tenant string, at time.Time) time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.tenant(tenant)[1] // a copy: rolling it moves nothing of the tenant's
	f.roll(at)
	return f.start.Add(f.w)
}

// UseDay counts n calls of tenant made earlier in its day by another client of the app: they
// count in its day window only (the minute and the app's minute they were made in are over).
func (x *Xero) UseDay(tenant string, n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	d := &x.tenant(tenant)[1]
	d.roll(x.Now())
	d.n += n
}

// RefusedFor returns how many calls were refused with X-Rate-Limit-Problem problem ("minute",
// "day", "appminute" or "concurrent").
func (x *Xero) RefusedFor(problem string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.problems[problem]
}

// refusedFor counts a refusal for problem; x.mu is held.
func (x *Xero) refusedFor(problem string) {
	if x.problems == nil {
		x.problems = map[string]int{}
	}
	x.problems[problem]++
}

package main

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Xero's published limits (developer.xero.com, "OAuth 2.0 API limits"): per tenant 60 calls a
// minute, 5000 a day and 5 in flight; per app 10 000 calls a minute across all tenants.
const (
	xeroMinuteLimit    = 60
	xeroDayLimit       = 5000
	xeroConcurrent     = 5
	xeroAppMinuteLimit = 10_000
)

// upstream is a local stand-in for the Xero API that enforces Xero's limits strictly, in time
// compressed by scale, and answers the way Xero does: 429 with Retry-After and
// X-Rate-Limit-Problem when a limit is hit, and the X-*Limit-Remaining headers on every
// response. It only ever listens on loopback.
type upstream struct {
	minute, day time.Duration // scaled windows
	fixed       bool          // minute limit as an aligned fixed window instead of rolling
	latency     time.Duration // how long an accepted call is in progress before its answer
	now         func() time.Time

	mu       sync.Mutex
	tenants  map[string]*tenantLog
	app      []time.Time // accepted calls of the app, for the app minute limit
	accepted int
	refused  int
	history  map[string]*callLog // every call's instant per tenant, for -plot; nil: none kept
}

// tenantLog is every call accepted for one tenant, oldest first, and the peak it has reached.
type tenantLog struct {
	minute   []time.Time
	day      []time.Time
	inFlight int
	peak     int // most calls ever counted in one minute window
}

func newUpstream(scale float64, fixed bool) *upstream {
	return &upstream{
		minute:  time.Duration(float64(time.Minute) / scale),
		day:     time.Duration(float64(24*time.Hour) / scale),
		fixed:   fixed,
		now:     time.Now,
		tenants: map[string]*tenantLog{},
	}
}

// since drops the instants at or before cut: a call accepted at a counts while t < a+W.
func since(log []time.Time, cut time.Time) []time.Time {
	i := 0
	for i < len(log) && !log[i].After(cut) {
		i++
	}
	return log[i:]
}

// minuteCount returns the calls that count in the tenant's minute window at t, and when the
// oldest of them stops counting.
func (u *upstream) minuteCount(tl *tenantLog, t time.Time) (int, time.Time) {
	if u.fixed {
		start := t.Truncate(u.minute)
		n := 0
		for _, a := range tl.minute {
			if !a.Before(start) {
				n++
			}
		}
		return n, start.Add(u.minute)
	}
	tl.minute = since(tl.minute, t.Add(-u.minute))
	if len(tl.minute) == 0 {
		return 0, t
	}
	return len(tl.minute), tl.minute[0].Add(u.minute)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant := r.Header.Get("Xero-Tenant-Id")
	if tenant == "" {
		http.Error(w, "missing Xero-Tenant-Id header", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	t := u.now()
	tl := u.tenants[tenant]
	if tl == nil {
		tl = &tenantLog{}
		u.tenants[tenant] = tl
	}
	if u.fixed {
		tl.minute = since(tl.minute, t.Truncate(u.minute).Add(-1))
	}
	minuteUsed, minuteFree := u.minuteCount(tl, t)
	tl.day = since(tl.day, t.Add(-u.day))
	u.app = since(u.app, t.Add(-u.minute))

	problem, retry := "", time.Duration(0)
	switch {
	case minuteUsed >= xeroMinuteLimit:
		problem, retry = "minute", minuteFree.Sub(t)
	case len(tl.day) >= xeroDayLimit:
		problem, retry = "day", tl.day[0].Add(u.day).Sub(t)
	case len(u.app) >= xeroAppMinuteLimit:
		problem, retry = "appminute", u.app[0].Add(u.minute).Sub(t)
	case tl.inFlight >= xeroConcurrent:
		problem, retry = "concurrent", time.Second
	}
	if u.history != nil {
		u.keep(tenant, t, problem == "")
	}
	if problem == "" {
		tl.minute = append(tl.minute, t)
		tl.day = append(tl.day, t)
		u.app = append(u.app, t)
		tl.inFlight++
		minuteUsed++
		tl.peak = max(tl.peak, minuteUsed)
		u.accepted++
	} else {
		u.refused++
	}
	h := w.Header()
	h.Set("X-MinLimit-Remaining", strconv.Itoa(max(0, xeroMinuteLimit-minuteUsed)))
	h.Set("X-DayLimit-Remaining", strconv.Itoa(max(0, xeroDayLimit-len(tl.day))))
	h.Set("X-AppMinLimit-Remaining", strconv.Itoa(max(0, xeroAppMinuteLimit-len(u.app))))
	u.mu.Unlock()

	if problem != "" {
		// Retry-After is whole seconds (RFC 9110 §10.2.3), rounded up so it is never early.
		h.Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
		h.Set("X-Rate-Limit-Problem", problem)
		http.Error(w, fmt.Sprintf("rate limit exceeded: %s", problem), http.StatusTooManyRequests)
		return
	}
	defer func() {
		u.mu.Lock()
		tl.inFlight--
		u.mu.Unlock()
	}()
	if u.latency > 0 {
		// The call is in progress meanwhile, and counts against the 5 in flight.
		time.Sleep(u.latency)
	}
	h.Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"Status":"OK","Invoices":[]}`)
}

// preload counts n calls for tenant at instant at, made by some other app: the local stand-in
// for a tenant shared with another integration.
func (u *upstream) preload(tenant string, n int, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	tl := u.tenants[tenant]
	if tl == nil {
		tl = &tenantLog{}
		u.tenants[tenant] = tl
	}
	for range n {
		tl.minute = append(tl.minute, at)
		tl.day = append(tl.day, at)
		u.app = append(u.app, at)
		if u.history != nil {
			u.keep(tenant, at, true)
		}
	}
}

// keepHistory makes the upstream keep every call's instant, for calls; call it before serving.
func (u *upstream) keepHistory() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.history = map[string]*callLog{}
}

// keep notes one call of tenant at t, accepted or refused; u.mu is held.
func (u *upstream) keep(tenant string, t time.Time, accepted bool) {
	l := u.history[tenant]
	if l == nil {
		l = &callLog{tenant: tenant}
		u.history[tenant] = l
	}
	if accepted {
		l.accepted = append(l.accepted, t)
	} else {
		l.refused = append(l.refused, t)
	}
}

// calls returns a copy of the history kept for each of tenants, in their order.
func (u *upstream) calls(tenants []string) []callLog {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]callLog, len(tenants))
	for i, id := range tenants {
		out[i].tenant = id
		if l := u.history[id]; l != nil {
			out[i].accepted = slices.Clone(l.accepted)
			out[i].refused = slices.Clone(l.refused)
		}
	}
	return out
}

// stats returns the calls accepted and refused, and each tenant's peak minute count.
func (u *upstream) stats() (accepted, refused int, peaks map[string]int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	peaks = map[string]int{}
	for k, tl := range u.tenants {
		peaks[k] = tl.peak
	}
	return u.accepted, u.refused, peaks
}

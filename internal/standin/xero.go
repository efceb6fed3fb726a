package standin

import (
	"hash/fnv"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Xero stands in for the Xero API: per tenant (the Xero-Tenant-Id header) 60 calls a minute
// and 5000 a day, per app 10 000 a minute (developer.xero.com, "OAuth 2.0 API limits"), each in
// fixed windows, as Xero's page says: a tenant's windows start at an offset of their own (from
// a hash of its id: "will reset at different times for each tenant"), the app's on the minute. Every answer carries X-MinLimit-Remaining, X-DayLimit-Remaining and
// X-AppMinLimit-Remaining; a refusal is a 429 with Retry-After (seconds) and
// X-Rate-Limit-Problem: minute, day or appminute. A call without a tenant is a 400. Xero
// also allows 5 calls in progress per tenant: a sixth is refused with a 429 and
// X-Rate-Limit-Problem: concurrent (with Retry-After: 1). Hold keeps each accepted call in
// progress that long (real time) so that concurrent callers overlap; MaxInFlight is the most
// a tenant had in progress at once.
type Xero struct {
	Now  func() time.Time
	Hold time.Duration
	Counts

	mu       sync.Mutex
	tenants  map[string]*[2]fixed
	app      fixed
	inFlight map[string]int
	most     int
	problems map[string]int // refusals per X-Rate-Limit-Problem (RefusedFor)
}

// XeroInFlight is the calls in progress Xero allows per tenant.
const XeroInFlight = 5

// MaxInFlight returns the most calls of one tenant that were in progress at once.
func (x *Xero) MaxInFlight() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.most
}

// NewXero returns a Xero stand-in reading instants from now.
func NewXero(now func() time.Time) *Xero {
	return &Xero{Now: now, tenants: map[string]*[2]fixed{}, app: fixed{limit: 10_000, w: time.Minute}}
}

// tenant returns tenant's windows, made on first use at the tenant's own offset.
func (x *Xero) tenant(id string) *[2]fixed {
	tl := x.tenants[id]
	if tl == nil {
		h := fnv.New64a()
		h.Write([]byte(id))
		off := time.Duration(h.Sum64() % uint64(24*time.Hour/time.Second) * uint64(time.Second))
		tl = &[2]fixed{{limit: 60, w: time.Minute, offset: off % time.Minute}, {limit: 5000, w: 24 * time.Hour, offset: off}}
		x.tenants[id] = tl
	}
	return tl
}

func (x *Xero) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant := r.Header.Get("Xero-Tenant-Id")
	if tenant == "" {
		http.Error(w, "no Xero-Tenant-Id", http.StatusBadRequest)
		return
	}
	x.mu.Lock()
	if x.inFlight == nil {
		x.inFlight = map[string]int{}
	}
	if x.inFlight[tenant] >= XeroInFlight {
		x.refusedFor("concurrent")
		x.mu.Unlock()
		x.refuse()
		date(w, x.Now())
		w.Header().Set("Retry-After", "1")
		w.Header().Set("X-Rate-Limit-Problem", "concurrent")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	x.inFlight[tenant]++
	x.most = max(x.most, x.inFlight[tenant])
	defer func() {
		time.Sleep(x.Hold) // outside the lock: the call stays in progress meanwhile
		x.mu.Lock()
		x.inFlight[tenant]--
		x.mu.Unlock()
	}()
	defer x.mu.Unlock()
	now := x.Now()
	date(w, now)
	tl := x.tenant(tenant)
	problem, wait := "", time.Duration(0)
	if ok, d := tl[0].room(now); !ok {
		problem, wait = "minute", d
	} else if ok, d := tl[1].room(now); !ok {
		problem, wait = "day", d
	} else if ok, d := x.app.room(now); !ok {
		problem, wait = "appminute", d
	}
	if problem == "" {
		tl[0].add(now)
		tl[1].add(now)
		x.app.add(now)
	}
	h := w.Header()
	h.Set("X-MinLimit-Remaining", strconv.Itoa(tl[0].remaining(now)))
	h.Set("X-DayLimit-Remaining", strconv.Itoa(tl[1].remaining(now)))
	h.Set("X-AppMinLimit-Remaining", strconv.Itoa(x.app.remaining(now)))
	if problem != "" {
		x.refuse()
		x.refusedFor(problem)
		h.Set("Retry-After", strconv.FormatInt(seconds(wait), 10))
		h.Set("X-Rate-Limit-Problem", problem)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	x.accept(now)
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"Status":"OK"}`))
}

// MinuteEnds returns when the minute window of tenant that holds at ends: its calls count no
// more from then on.
func (x *Xero) MinuteEnds(tenant string, at time.Time) time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.tenant(tenant)[0] // a copy: rolling it moves nothing of the tenant's
	f.roll(at)
	return f.start.Add(f.w)
}

// Use counts n calls of tenant made by another client of the app, as if made now.
func (x *Xero) Use(tenant string, n int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.Now()
	tl := x.tenant(tenant)
	for range n {
		tl[0].add(now)
		tl[1].add(now)
		x.app.add(now)
	}
}

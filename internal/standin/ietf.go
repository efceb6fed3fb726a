package standin

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// IETF stands in for an API that states its limits in the RateLimit-Policy and RateLimit
// fields of draft-ietf-httpapi-ratelimit-headers-11
// (https://www.ietf.org/archive/id/draft-ietf-httpapi-ratelimit-headers-11.html), as the draft
// writes them:
//
//   - every answer, accepted or refused, carries RateLimit-Policy with each policy's name, q,
//     qu when it is not requests (section 3.1.2), w for a rate, and pk for a policy kept per
//     partition key (sections 3.1 and 3.2), and RateLimit with each policy's r, t (seconds
//     until the window ends, the effective window of section 4.1.2) and pk (section 4.1);
//   - its windows are fixed, as the draft's B.2.1 example ("fixedwindow", q=100;w=60, r=99;t=50)
//     shows one: each starts at a whole number of w since the Unix epoch, and its count starts
//     again there;
//   - a request over a policy is refused with 429, Retry-After (seconds until it fits, which
//     is not earlier than the end of the effective window, as section 6 asks) and a problem
//     body of type quota-exceeded naming the violated policies (section 5.1); a refused
//     request does not count;
//   - a content-bytes policy counts the request's body size (ContentLength), a
//     concurrent-requests one the requests in progress (section 3.1.2), refused with
//     Retry-After: 1 (the draft gives no time for it).
//
// A policy without Partition is kept per client (the Authorization field); one with it, per
// the partition key it returns, shared by every client that gets the same. Service is how long
// each accepted request stays in progress (real time). SetPolicies changes the policies at
// run time; counts of policies kept under the same name and partition carry over.
type IETF struct {
	Now     func() time.Time
	Service time.Duration
	Counts

	mu       sync.Mutex
	policies []IETFPolicy
	windows  map[string]*ietfWindow // policy name, partition → its current window
	inFlight map[string]int         // policy name, partition → requests in progress
	most     int
}

// IETFPolicy is one quota policy of the IETF stand-in.
type IETFPolicy struct {
	Name   string
	Quota  int
	Window time.Duration // whole seconds; unused for concurrent-requests
	Unit   string        // "" (requests), "content-bytes" or "concurrent-requests"
	// Partition returns the request's partition key, sent as pk; nil keeps the policy per
	// client and sends no pk.
	Partition func(*http.Request) []byte
}

type ietfWindow struct {
	start time.Time
	used  int
}

// NewIETF returns an IETF stand-in reading instants from now, with policies.
func NewIETF(now func() time.Time, policies ...IETFPolicy) *IETF {
	return &IETF{Now: now, policies: policies, windows: map[string]*ietfWindow{}, inFlight: map[string]int{}}
}

// SetPolicies replaces the policies, as a server whose quotas change at run time does.
func (s *IETF) SetPolicies(policies ...IETFPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policies = policies
}

// MaxInFlight returns the most requests of one concurrent-requests partition in progress at once.
func (s *IETF) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most
}

// partition returns req's partition under p, and the pk to send ("" for none).
func (p IETFPolicy) partition(req *http.Request) (string, string) {
	if p.Partition == nil {
		return "client:" + req.Header.Get("Authorization"), ""
	}
	pk := p.Partition(req)
	return "pk:" + string(pk), ":" + base64.StdEncoding.EncodeToString(pk) + ":"
}

// window returns p's current window for partition at now, started afresh at its boundary.
func (s *IETF) window(p IETFPolicy, part string, now time.Time) *ietfWindow {
	k := p.Name + "\x00" + part
	w := s.windows[k]
	ws := max(1, int64(p.Window/time.Second))
	start := time.Unix(now.Unix()-now.Unix()%ws, 0) // whole windows since the Unix epoch
	if w == nil || !w.start.Equal(start) {
		w = &ietfWindow{start: start}
		s.windows[k] = w
	}
	return w
}

func (s *IETF) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cost := int(max(r.ContentLength, 0))
	s.mu.Lock()
	now := s.Now()
	date(w, now)
	var violated []string
	wait := time.Duration(0)
	var held []string
	for _, p := range s.policies {
		part, _ := p.partition(r)
		switch p.Unit {
		case "concurrent-requests":
			if s.inFlight[p.Name+"\x00"+part] >= p.Quota {
				violated = append(violated, p.Name)
				wait = max(wait, time.Second)
			}
		default:
			n := 1
			if p.Unit == "content-bytes" {
				n = cost
			}
			win := s.window(p, part, now)
			if win.used+n > p.Quota {
				violated = append(violated, p.Name)
				wait = max(wait, win.start.Add(p.Window).Sub(now))
			}
		}
	}
	if len(violated) == 0 {
		for _, p := range s.policies {
			part, _ := p.partition(r)
			switch p.Unit {
			case "concurrent-requests":
				k := p.Name + "\x00" + part
				s.inFlight[k]++
				s.most = max(s.most, s.inFlight[k])
				held = append(held, k)
			case "content-bytes":
				s.window(p, part, now).used += cost
			default:
				s.window(p, part, now).used++
			}
		}
	}
	s.fields(w.Header(), r, now)
	s.mu.Unlock()
	if len(violated) > 0 {
		s.refuse()
		w.Header().Set("Retry-After", strconv.FormatInt(seconds(wait), 10))
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"violated-policies":["` + strings.Join(violated, `","`) + `"]}`))
		return
	}
	s.accept(now)
	time.Sleep(s.Service) // in progress meanwhile
	s.mu.Lock()
	for _, k := range held {
		s.inFlight[k]--
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}`))
}

// fields writes RateLimit-Policy and RateLimit for r at now (after r was counted, if it was).
func (s *IETF) fields(h http.Header, r *http.Request, now time.Time) {
	var pol, lim []string
	for _, p := range s.policies {
		part, pk := p.partition(r)
		m := strconv.Quote(p.Name) + ";q=" + strconv.Itoa(p.Quota)
		if p.Unit != "" {
			m += ";qu=" + strconv.Quote(p.Unit)
		}
		var rem int
		var reset int64
		switch p.Unit {
		case "concurrent-requests":
			rem = max(0, p.Quota-s.inFlight[p.Name+"\x00"+part])
		default:
			m += ";w=" + strconv.FormatInt(int64(p.Window/time.Second), 10)
			win := s.window(p, part, now)
			rem = max(0, p.Quota-win.used)
			reset = seconds(win.start.Add(p.Window).Sub(now))
		}
		l := strconv.Quote(p.Name) + ";r=" + strconv.Itoa(rem)
		if p.Unit != "concurrent-requests" {
			l += ";t=" + strconv.FormatInt(reset, 10)
		}
		if pk != "" {
			m += ";pk=" + pk
			l += ";pk=" + pk
		}
		pol, lim = append(pol, m), append(lim, l)
	}
	h.Set("RateLimit-Policy", strings.Join(pol, ", "))
	h.Set("RateLimit", strings.Join(lim, ", "))
}

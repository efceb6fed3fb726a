package headers

import (
	"net/http"
	"time"

	"github.com/dunglas/httpsfv"
)

// Policy is one quota policy of the IETF rate-limit fields (draft-ietf-httpapi-ratelimit-headers):
// a member of RateLimit-Policy and, by the same name, of RateLimit.
type Policy struct {
	// Name is the policy's name, the list member's value (a String or a Token).
	Name string
	// Quota is the policy's q parameter: requests allowed per window, or Unknown.
	Quota int
	// Window is the policy's w parameter in seconds as a duration; 0 when absent.
	Window time.Duration
	// Remaining is RateLimit's r parameter for the policy, or Unknown.
	Remaining int
	// Reset is RateLimit's t parameter in seconds as a duration: when the quota is restored;
	// Unknown (as a Duration, -1ns) when absent.
	Reset time.Duration
}

// ParseIETF reads the RateLimit-Policy and RateLimit structured fields (RFC 9651 lists) of h
// with github.com/dunglas/httpsfv and pairs their members by name, in RateLimit-Policy's order
// followed by members only RateLimit names. A field that does not parse is ignored whole. A
// member whose value is not a String or Token, or whose required parameter (q in
// RateLimit-Policy, r in RateLimit) is not an integer from 0 to 2^31, is skipped; an optional
// parameter (w, t) that is not such an integer is left out. Parameters other than q, w, r
// and t (qu, pk) are ignored.
func ParseIETF(h http.Header) []Policy {
	if len(h.Values(fieldPolicy)) == 0 && len(h.Values(fieldRateLimit)) == 0 {
		return nil
	}
	var out []Policy
	byName := map[string]int{}
	get := func(name string) *Policy {
		i, ok := byName[name]
		if !ok {
			i = len(out)
			byName[name] = i
			out = append(out, Policy{Name: name, Quota: Unknown, Remaining: Unknown, Reset: Unknown})
		}
		return &out[i]
	}
	members(h, fieldPolicy, func(name string, p *httpsfv.Params) {
		q, ok := param(p, "q")
		if !ok {
			return // q is required
		}
		pol := get(name)
		pol.Quota = int(q)
		if w, ok := param(p, "w"); ok {
			pol.Window = time.Duration(w) * time.Second
		}
	})
	members(h, fieldRateLimit, func(name string, p *httpsfv.Params) {
		r, ok := param(p, "r")
		if !ok {
			return // r is required
		}
		pol := get(name)
		pol.Remaining = int(r)
		if t, ok := param(p, "t"); ok {
			pol.Reset = time.Duration(t) * time.Second
		}
	})
	return out
}

// members calls f for each list member of field whose value is a String or Token.
func members(h http.Header, field string, f func(name string, p *httpsfv.Params)) {
	vs := h.Values(field)
	if len(vs) == 0 {
		return
	}
	l, err := httpsfv.UnmarshalList(vs)
	if err != nil {
		return
	}
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		if !ok || it.Params == nil {
			continue
		}
		switch v := it.Value.(type) {
		case string:
			f(v, it.Params)
		case httpsfv.Token:
			f(string(v), it.Params)
		}
	}
}

// param returns an integer parameter between 0 and the largest count or number of seconds we
// keep.
func param(p *httpsfv.Params, name string) (int64, bool) {
	v, ok := p.Get(name)
	if !ok {
		return 0, false
	}
	i, ok := v.(int64)
	if !ok || i < 0 || i > 1<<31 {
		return 0, false
	}
	return i, true
}

// IETFReader reads the IETF fields into a Report: each policy that gives both a window (w)
// and a remaining count (r) is about the request's key's rule with that window, its quota (q)
// is the upstream's limit, and its reset (t) is when that usage is freed.
//
// It is a ReaderFunc, and declares no windows: they come with each response.
var IETFReader = ReaderFunc(readIETF)

func readIETF(h http.Header, _ time.Time) Report {
	var r Report
	for _, p := range ParseIETF(h) {
		if p.Window > 0 && p.Remaining != Unknown {
			r.Signals = append(r.Signals, Signal{Window: p.Window, Remaining: p.Remaining, Limit: p.Quota, Reset: p.Reset})
		}
	}
	return r
}

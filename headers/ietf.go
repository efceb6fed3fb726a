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
	// Quota is the policy's q parameter: quota units allowed per window, or Unknown.
	Quota int
	// Unit is the policy's qu parameter (draft-11 section 3.1.2): "requests" (the registry
	// spells it "request"), "content-bytes", "concurrent-requests" or another registered
	// unit; "" when RateLimit-Policy gives none, which means requests.
	Unit string
	// Partition is the pk parameter's bytes (sections 3.1.4 and 4.1.3): RateLimit's when it
	// gives one, else RateLimit-Policy's; "" when neither does. Quotas are kept per partition
	// key, so requests that get the same one share the quota.
	Partition string
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
// member whose value is not a String or Token, whose required parameter (q in
// RateLimit-Policy, r in RateLimit) is not an integer from 0 to 2^31, or whose qu is not a
// String or pk not a Byte Sequence, is skipped (malformed fields are ignored, draft-11 section
// 7); an optional w or t that is not such an integer is left out. Other parameters are
// comments and ignored.
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
		unit, uok := stringParam(p, "qu")
		pk, pok := bytesParam(p, "pk")
		if !ok || !uok || !pok {
			return // q is required; qu and pk, when given, must be of their types
		}
		pol := get(name)
		pol.Quota, pol.Unit = int(q), unit
		if pk != "" {
			pol.Partition = pk
		}
		if w, ok := param(p, "w"); ok {
			pol.Window = time.Duration(w) * time.Second
		}
	})
	members(h, fieldRateLimit, func(name string, p *httpsfv.Params) {
		r, ok := param(p, "r")
		pk, pok := bytesParam(p, "pk")
		if !ok || !pok {
			return // r is required; pk, when given, must be a Byte Sequence
		}
		pol := get(name)
		pol.Remaining = int(r)
		if pk != "" {
			pol.Partition = pk // the request's own partition key
		}
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

// stringParam returns a String parameter: "" and true when it is absent, false when it is of
// another type.
func stringParam(p *httpsfv.Params, name string) (string, bool) {
	v, ok := p.Get(name)
	if !ok {
		return "", true
	}
	s, ok := v.(string)
	return s, ok
}

// bytesParam returns a Byte Sequence parameter as a string of its bytes: "" and true when it
// is absent, false when it is of another type.
func bytesParam(p *httpsfv.Params, name string) (string, bool) {
	v, ok := p.Get(name)
	if !ok {
		return "", true
	}
	b, ok := v.([]byte)
	return string(b), ok
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

package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// Field names (draft-ietf-httpapi-ratelimit-headers; RFC 9110) in Go's canonical form, so that
// setting them needs no canonicalization per request. HTTP field names are case-insensitive.
const (
	fieldPolicy     = "Ratelimit-Policy"
	fieldRateLimit  = "Ratelimit"
	fieldRetryAfter = "Retry-After"
)

// maxSFInteger is the largest RFC 9651 Integer.
const maxSFInteger = 999_999_999_999_999

// policyNames returns one distinct name per rule: given ones, or ones derived from the rules.
func policyNames(rules []strategy.Rule, given []string) ([]string, error) {
	if given != nil {
		if len(given) != len(rules) {
			return nil, fmt.Errorf("ratemonitor: middleware: %d policy names for %d rules", len(given), len(rules))
		}
		seen := map[string]bool{}
		for _, n := range given {
			if n == "" {
				return nil, errors.New("ratemonitor: middleware: empty policy name")
			}
			for _, c := range []byte(n) {
				if c < 0x20 || c > 0x7e {
					return nil, fmt.Errorf("ratemonitor: middleware: policy name %q: want printable ASCII (an RFC 9651 String)", n)
				}
			}
			if seen[n] {
				return nil, fmt.Errorf("ratemonitor: middleware: policy name %q given twice", n)
			}
			seen[n] = true
		}
		return given, nil
	}
	names := make([]string, len(rules))
	seen := map[string]bool{}
	for i, r := range rules {
		base := strconv.Itoa(r.EffectiveLimit()) + "-per-" + windowText(r.EffectiveWindow())
		name := base
		for k := 2; seen[name]; k++ {
			name = base + "-" + strconv.Itoa(k)
		}
		seen[name] = true
		names[i] = name
	}
	return names, nil
}

// windowText writes w in the largest of s, ms, µs ("us") and ns that it is a whole number of.
func windowText(w time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if w%u.d == 0 {
			return strconv.FormatInt(int64(w/u.d), 10) + u.unit
		}
	}
	return strconv.FormatInt(int64(w), 10) + "ns"
}

// seconds rounds d up to whole seconds, never below 0: the delay-seconds of Retry-After
// (RFC 9110 §10.2.3) and the w and t parameters, so a client that waits that long is never
// early.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// policyField serializes RateLimit-Policy, which depends only on the rules: one member
// "<name>";q=<effective limit>;w=<effective window in seconds, rounded up> per rule.
func policyField(rules []strategy.Rule, names []string) (string, error) {
	l := make(httpsfv.List, len(rules))
	for i, r := range rules {
		it := httpsfv.NewItem(names[i])
		it.Params.Add("q", int64(r.EffectiveLimit()))
		it.Params.Add("w", seconds(r.EffectiveWindow()))
		l[i] = it
	}
	return httpsfv.Marshal(l)
}

// memberNames serializes each policy name as an RFC 9651 String (quoted and escaped), once, so
// that the RateLimit field can be built per request by appending integers.
func memberNames(names []string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		v, err := httpsfv.Marshal(httpsfv.NewItem(n))
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// setRateLimit writes the RateLimit field for d: one member "<name>";r=<remaining>;t=<reset in
// seconds, rounded up> per rule. r and t are RFC 9651 Integers (at most 15 digits): remaining
// is below 2^31 and a reset at most strategy.MaxWindow, about 3·10^8 s.
func (l *Limiter) setRateLimit(h http.Header, d strategy.Decision) {
	b := make([]byte, 0, 32*len(d.Rules))
	for i, st := range d.Rules {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, l.members[i]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(max(0, st.Remaining)), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, seconds(st.Reset), 10)
	}
	h[fieldPolicy] = []string{l.policy} // a slice of its own: handlers may change it
	h[fieldRateLimit] = []string{string(b)}
}

// Package strategy holds what a user of ratemonitor writes and reads about limits: the Rule a
// limit is written as (ParseRule reads the CLI's syntax), the usage and decisions a Transport or
// a middleware Limiter reports per rule, and the errors of a burst that can never fit.
//
// An algorithm is chosen by its package (rollingwindow, fixedwindow, tokenbucket), whose New
// layers rules into a strategy for ratemonitor.WithStrategy or middleware.New. What algorithms
// and stores implement (counters, the layering of rules on a key, upstream state) is in package
// strategy/engine.
package strategy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/rulecheck"
)

// DefaultGranularity is the finest default bucket width, 1 s: the one a rule with Granularity
// zero gets when its Window+Margin is at most a minute, is not a whole number of seconds, or
// has no whole-second divisor between 1 s and a sixtieth of itself. Longer windows get a
// coarser default: see DefaultGranularityFor.
const DefaultGranularity = time.Second

// DefaultGranularityFor returns the bucket width a rule gets when its Granularity is zero, for
// its effective window e = Window+Margin: the largest whole number of seconds that divides e
// and is at most max(1 s, e/60). That is 1 s for every e up to a minute, 1 min for an hour,
// 24 min for a day and 24m1s for 24h1m: a slot is freed less than max(1 s, e/60) late (under
// 1.7 % of the window; never early), and a window of whole minutes is kept in at most 61
// buckets a key. When e is not a positive whole number of seconds it returns
// DefaultGranularity. It allocates nothing; an e that is not whole minutes costs a divisor
// search (about 1 µs for a day; BenchmarkBucket).
// See docs/rules.md#granularity-how-late-a-slot-can-be-freed.
func DefaultGranularityFor(e time.Duration) time.Duration {
	if e <= 0 || e%time.Second != 0 {
		return DefaultGranularity
	}
	if e%time.Minute == 0 {
		return e / 60
	}
	n := int64(e / time.Second)
	m := n / 60 // the largest width allowed, in seconds
	if m < 2 {
		return DefaultGranularity
	}
	// The largest divisor d ≤ m of n: first among those at least √n, d = n/i for the smallest
	// divisor i ≥ n/m (d ≤ m exactly when i ≥ n/m), then among those below √n, downwards.
	i := (n + m - 1) / m
	for ; i*i <= n; i++ {
		if n%i == 0 {
			return time.Duration(n/i) * time.Second
		}
	}
	for d := min(m, i-1); d > 1; d-- {
		if n%d == 0 {
			return time.Duration(d) * time.Second
		}
	}
	return DefaultGranularity
}

// MaxWindow is the longest Window+Margin a rule may have: ten years keeps every instant
// between now and 2250 plus a window inside time.Time.UnixNano's range.
const MaxWindow = 10 * 365 * 24 * time.Hour

// ErrInvalidRule is wrapped by every error Rule.Validate and ParseRule return.
var ErrInvalidRule = errors.New("invalid rule")

// Rule is one limit: at most Limit requests per Window.
//
// The zero Rule is invalid (Validate reports it); a Rule is a plain value, safe to copy.
type Rule struct {
	// Limit is the number of requests the upstream allows per Window. It must be at least 1.
	Limit int
	// Window is the length of the window, e.g. time.Minute for "60 per minute".
	Window time.Duration
	// Granularity is the width g of the time buckets counts are grouped in. Zero means
	// DefaultGranularityFor(Window+Margin), which Bucket returns: 1 s for every window up to a
	// minute, a sixtieth of a window of whole minutes (24 min for a day). It applies to the
	// rolling window; the fixed window and the token bucket ignore it. Window+Margin must be a
	// whole multiple of it. A slot is never freed early, and less than g late; a key keeps up to
	// (Window+Margin)/g + 1 buckets per rule, so time.Second on a day rule costs about 5 000
	// buckets for a key of 5000 a day in steady traffic, and the Redis and DynamoDB stores
	// refuse it. See docs/rules.md#granularity-how-late-a-slot-can-be-freed.
	Granularity time.Duration
	// Margin is time added to Window when counting: a request recorded at s is held until
	// s+Window+Margin. It absorbs the delay between recording a request and the upstream
	// counting it. Zero by default; never negative.
	Margin time.Duration
	// Headroom is the number of slots held back from Limit, for requests this monitor does
	// not see (another tool sharing the tenant). Zero by default; less than Limit.
	Headroom int
}

// Validate reports whether r can be enforced. The error wraps ErrInvalidRule and names the
// field at fault.
func (r Rule) Validate() error {
	if err := r.validateBase(); err != nil {
		return err
	}
	g := r.Bucket()
	switch {
	case r.Window < g:
		return fmt.Errorf("%w %s: window %v is shorter than the granularity %v", ErrInvalidRule, r, r.Window, g)
	case r.EffectiveWindow()%g != 0:
		why := ""
		if r.Granularity == 0 {
			// Only a window+margin that is not a whole number of seconds gets here unset.
			why = " (the default for a window+margin that is not a whole number of seconds)"
		}
		return fmt.Errorf("%w %s: window+margin %v is not a whole multiple of the granularity %v%s: set Granularity to a divisor of it (such as %v)",
			ErrInvalidRule, r, r.EffectiveWindow(), g, why, gcdDuration(r.EffectiveWindow(), g))
	}
	return nil
}

// validateBase checks what every algorithm needs, granularity aside: a limit, a positive window
// within MaxWindow, and sane margin and headroom (engine.New makes the same checks for the
// algorithms that use no buckets).
func (r Rule) validateBase() error {
	if msg := rulecheck.Base(r.Limit, r.Window, r.Granularity, r.Margin, r.Headroom, MaxWindow); msg != "" {
		return fmt.Errorf("%w %s: %s", ErrInvalidRule, r, msg)
	}
	return nil
}

// Bucket returns the granularity in force: Granularity, or when it is zero the default for
// the rule's effective window, DefaultGranularityFor(Window+Margin) (1 s up to a minute; 24 min
// for a day), unless that is longer than Window itself (a margin over 59 times the window), when
// it is DefaultGranularity, 1 s, so that such a rule stays as valid as it was with 1 s buckets.
// It allocates nothing; it is O(1) unless Granularity is zero and Window+Margin is not a whole
// number of minutes (see DefaultGranularityFor).
func (r Rule) Bucket() time.Duration {
	if r.Granularity != 0 {
		return r.Granularity
	}
	if g := DefaultGranularityFor(r.EffectiveWindow()); g <= r.Window {
		return g
	}
	return DefaultGranularity
}

// EffectiveWindow is how long a recorded request is held: Window + Margin.
func (r Rule) EffectiveWindow() time.Duration { return r.Window + r.Margin }

// EffectiveLimit is how many requests the monitor lets into one window: Limit − Headroom.
func (r Rule) EffectiveLimit() int { return r.Limit - r.Headroom }

// String formats r as "limit/window", e.g. "60/1m0s" (a form ParseRule reads), followed by
// any granularity, margin and headroom that differ from the defaults:
// "60/1m0s (granularity 100ms, margin 1s, headroom 5)".
func (r Rule) String() string {
	s := strconv.Itoa(r.Limit) + "/" + r.Window.String()
	var extra []string
	if r.Granularity != 0 {
		extra = append(extra, "granularity "+r.Granularity.String())
	}
	if r.Margin != 0 {
		extra = append(extra, "margin "+r.Margin.String())
	}
	if r.Headroom != 0 {
		extra = append(extra, "headroom "+strconv.Itoa(r.Headroom))
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// ParseRule reads a rule written as "LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N]",
// the syntax of cmd/ratemonitor's --rule flag: LIMIT and N are whole numbers, WINDOW and D
// time.ParseDuration strings, e.g. "60/1m", "5000/24h,granularity=10s" or
// "60/1m,margin=500ms,granularity=500ms,headroom=5". Spaces around the parts are ignored; each
// option may be given once; an option not given is zero in the Rule (the defaults: the
// granularity Rule.Bucket picks for the window, 1 s up to a minute and a sixtieth of a day for
// a day; no margin, no headroom).
//
// Every error wraps ErrInvalidRule and says what was wrong: the syntax, an unknown or repeated
// option, or a value Validate refuses whatever the algorithm (a limit below 1, a window that is
// not positive, a negative granularity or margin, headroom not below the limit, a window over
// MaxWindow). Whether Window+Margin is a whole multiple of the granularity matters only to the
// algorithms that use buckets, so engine.New checks it with the algorithm (Rule.Validate checks it
// always): ParseRule("10/1500ms") is a token-bucket rule the rolling window refuses.
func ParseRule(s string) (Rule, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %q: "+format, append([]any{ErrInvalidRule, s}, a...)...)
	}
	const syntax = "want LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N], e.g. 60/1m or 5000/24h,granularity=10s"
	parts := strings.Split(s, ",")
	limit, window, ok := strings.Cut(strings.TrimSpace(parts[0]), "/")
	if !ok {
		return Rule{}, bad("%s", syntax)
	}
	n, err := strconv.Atoi(limit)
	if err != nil {
		return Rule{}, bad("limit %q is not a whole number; %s", limit, syntax)
	}
	w, err := time.ParseDuration(window)
	if err != nil {
		return Rule{}, bad("window %q is not a duration such as 1m or 24h; %s", window, syntax)
	}
	r := Rule{Limit: n, Window: w}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		name, v, hasValue := strings.Cut(strings.TrimSpace(p), "=")
		switch name {
		case "granularity", "margin", "headroom":
		default:
			return Rule{}, bad("unknown option %q: want granularity=D, margin=D or headroom=N", strings.TrimSpace(p))
		}
		if !hasValue {
			return Rule{}, bad("option %q has no value: write %s=VALUE", name, name)
		}
		if seen[name] {
			return Rule{}, bad("%s is given twice", name)
		}
		seen[name] = true
		if name == "headroom" {
			h, err := strconv.Atoi(v)
			if err != nil {
				return Rule{}, bad("headroom %q is not a whole number", v)
			}
			r.Headroom = h
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return Rule{}, bad("%s %q is not a duration such as 10s or 500ms", name, v)
		}
		if name == "margin" {
			r.Margin = d
		} else {
			r.Granularity = d
		}
	}
	if err := r.validateBase(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// gcdDuration is the greatest common divisor of a and b (both > 0): the coarsest granularity
// that divides both the window and the one asked for.
func gcdDuration(a, b time.Duration) time.Duration {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

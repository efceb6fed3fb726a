package strategy

import (
	"errors"
	"testing"
	"time"
)

// TestParseRuleAcceptsOptionsInAnyOrder: the --rule syntax of cmd/ratemonitor, options in any order, spaces
// around the parts; an option left out is zero.
func TestParseRuleAcceptsOptionsInAnyOrder(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Rule
	}{
		{"60/1m", Rule{Limit: 60, Window: time.Minute}},
		{" 5000/24h ", Rule{Limit: 5000, Window: 24 * time.Hour}},
		{"5000/24h,granularity=10s", Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}},
		{"60/1m,margin=500ms,granularity=500ms,headroom=5", Rule{Limit: 60, Window: time.Minute, Granularity: 500 * time.Millisecond, Margin: 500 * time.Millisecond, Headroom: 5}},
		{"60/1m, headroom=59 , margin=2s", Rule{Limit: 60, Window: time.Minute, Margin: 2 * time.Second, Headroom: 59}},
		{"10/1500ms", Rule{Limit: 10, Window: 1500 * time.Millisecond}}, // a token-bucket rule: the bucket fit is New's
		{"60/1m,granularity=0s", Rule{Limit: 60, Window: time.Minute}},
	} {
		got, err := ParseRule(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestParseRuleRefusesSayingWhy: each refusal wraps ErrInvalidRule and says exactly what was wrong.
func TestParseRuleRefusesSayingWhy(t *testing.T) {
	const syntax = "want LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N], e.g. 60/1m or 5000/24h,granularity=10s"
	for _, c := range []struct{ in, want string }{
		{"", `invalid rule "": ` + syntax},
		{"60per1m", `invalid rule "60per1m": ` + syntax},
		{"x/1m", `invalid rule "x/1m": limit "x" is not a whole number; ` + syntax},
		{"60/soon", `invalid rule "60/soon": window "soon" is not a duration such as 1m or 24h; ` + syntax},
		{"60/1m,burst=3", `invalid rule "60/1m,burst=3": unknown option "burst=3": want granularity=D, margin=D or headroom=N`},
		{"60/1m,", `invalid rule "60/1m,": unknown option "": want granularity=D, margin=D or headroom=N`},
		{"60/1m,granularity", `invalid rule "60/1m,granularity": option "granularity" has no value: write granularity=VALUE`},
		{"60/1m,margin=1s,margin=2s", `invalid rule "60/1m,margin=1s,margin=2s": margin is given twice`},
		{"60/1m,granularity=fine", `invalid rule "60/1m,granularity=fine": granularity "fine" is not a duration such as 10s or 500ms`},
		{"60/1m,margin=", `invalid rule "60/1m,margin=": margin "" is not a duration such as 10s or 500ms`},
		{"60/1m,headroom=some", `invalid rule "60/1m,headroom=some": headroom "some" is not a whole number`},
		{"0/1m", "invalid rule 0/1m0s: limit is 0, it must be at least 1"},
		{"60/0s", "invalid rule 60/0s: window 0s must be positive"},
		{"60/1m,granularity=-1s", "invalid rule 60/1m0s (granularity -1s): granularity -1s is negative"},
		{"60/1m,margin=-1s", "invalid rule 60/1m0s (margin -1s): margin -1s is negative"},
		{"60/1m,headroom=60", "invalid rule 60/1m0s (headroom 60): headroom 60 must be at least 0 and less than the limit 60"},
		{"60/87600h1s", "invalid rule 60/87600h0m1s: window+margin is longer than 87600h0m0s"},
	} {
		got, err := ParseRule(c.in)
		if err == nil || err.Error() != c.want || !errors.Is(err, ErrInvalidRule) || got != (Rule{}) {
			t.Errorf("ParseRule(%q) = %+v, %v\nwant error %q", c.in, got, err, c.want)
		}
	}
}

// TestParseRuleLeavesGranularityFitToNew: ParseRule leaves the bucket fit to New, which checks it for
// the algorithms with buckets only.
func TestParseRuleLeavesGranularityFitToNew(t *testing.T) {
	r, err := ParseRule("60/1m,margin=500ms")
	if err != nil {
		t.Fatal(err)
	}
	want := "invalid rule 60/1m0s (margin 500ms): window+margin 1m0.5s is not a whole multiple of the granularity 1s (the default for a window+margin that is not a whole number of seconds): set Granularity to a divisor of it (such as 500ms)"
	if err := r.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %q", err, want)
	}
}

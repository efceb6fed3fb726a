package middleware

import (
	"net/http"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestRateLimitFieldBytesMatchHTTPSFV: the appended RateLimit field equals httpsfv's serialization
// byte for byte, for names with quotes, backslashes, spaces, commas, semicolons, equals.
func TestRateLimitFieldBytesMatchHTTPSFV(t *testing.T) {
	mem, _ := newStore(t)
	s := must(fixedwindow.New(strategy.Rule{Limit: 3, Window: 10 * time.Second}, strategy.Rule{Limit: 999_999_999_999_999, Window: 20 * time.Second},
		strategy.Rule{Limit: 7, Window: time.Hour}))
	names := []string{`a"b\c`, ` ;,=()<>"\\ `, "\x7e\x20\x21"}
	l, err := New(mem, s, WithPolicyNames(names...))
	if err != nil {
		t.Fatal(err)
	}
	d := strategy.Decision{Rules: []strategy.RuleState{
		{Rule: s.Rule(0), Remaining: 0, Reset: 1},
		{Rule: s.Rule(1), Remaining: 999_999_999_999_999, Reset: strategy.MaxWindow},
		{Rule: s.Rule(2), Remaining: 3, Reset: time.Hour + 1},
	}}
	h := http.Header{}
	l.setRateLimit(h, d)
	list := httpsfv.List{}
	for i, st := range d.Rules {
		it := httpsfv.NewItem(names[i])
		it.Params.Add("r", int64(st.Remaining))
		it.Params.Add("t", seconds(st.Reset))
		list = append(list, it)
	}
	want, err := httpsfv.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("Ratelimit"); got != want {
		t.Errorf("RateLimit\n got %q\nwant %q", got, want)
	}
	if _, err := httpsfv.UnmarshalList([]string{h.Get("Ratelimit")}); err != nil {
		t.Error(err)
	}
	if _, err := httpsfv.UnmarshalList([]string{h.Get("Ratelimit-Policy")}); err != nil {
		t.Error(err)
	}
	t.Logf("%s\n%s", h.Get("Ratelimit-Policy"), h.Get("Ratelimit"))
}

// TestB4NAT64ClientsShareOneKey: behind SIIT/NAT64 (RFC 6052's well-known prefix
// 64:ff9b::/96), every IPv4 client reaches the server as 64:ff9b::<its IPv4 address>. With the
// /64 default they all count under one key: one client's requests refuse every other's.

func httptestReq(remote string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	r.RemoteAddr = remote
	return r
}

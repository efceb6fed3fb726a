package middleware

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/credential"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// keyOf returns the key l counts a request from remote with header under.
func keyOf(t *testing.T, l *Limiter, remote string, header map[string]string) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header.Set(k, v)
	}
	k, err := l.keys.key(r)
	if err != nil {
		t.Fatalf("key of %s %v: %v", remote, header, err)
	}
	return k
}

func limiter(t *testing.T, opts ...Option) *Limiter {
	t.Helper()
	store, _ := newStore(t)
	l, err := New(store, must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute})), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestKeyFromPeerHeaderOrProxy(t *testing.T) {
	xff := "X-Forwarded-For"
	for _, c := range []struct {
		name   string
		opts   []Option
		remote string
		header map[string]string
		want   string
	}{
		{"peer", nil, "192.0.2.1:1234", nil, "ip:192.0.2.1"},
		{"peer other port", nil, "192.0.2.1:5678", nil, "ip:192.0.2.1"},
		{"peer without port", nil, "192.0.2.1", nil, "ip:192.0.2.1"},
		{"ipv4-mapped", nil, "[::ffff:192.0.2.1]:80", nil, "ip:192.0.2.1"},
		{"nat64 keyed by its ipv4 client", nil, "[64:ff9b::c000:201]:1000", nil, "ip:192.0.2.1"},
		{"nat64 another client", nil, "[64:ff9b::cb00:7107]:1000", nil, "ip:203.0.113.7"},
		{"ipv6 /64 by default", nil, "[2001:db8:1:2:aaaa::1]:443", nil, "ip:2001:db8:1:2::/64"},
		{"ipv6 whole", []Option{WithIPv6Prefix(128)}, "[2001:db8:1:2:aaaa::1]:443", nil, "ip:2001:db8:1:2:aaaa::1"},
		{"ipv6 zone dropped", []Option{WithIPv6Prefix(128)}, "[fe80::1%eth0]:443", nil, "ip:fe80::1"},
		{"ipv6 /64", []Option{WithIPv6Prefix(64)}, "[2001:db8:1:2:aaaa::1]:443", nil, "ip:2001:db8:1:2::/64"},
		{"ipv6 /64 same net", []Option{WithIPv6Prefix(64)}, "[2001:db8:1:2:bbbb:cccc:dddd:2]:80", nil, "ip:2001:db8:1:2::/64"},
		{"ipv6 /64 other net", []Option{WithIPv6Prefix(64)}, "[2001:db8:1:3::1]:80", nil, "ip:2001:db8:1:3::/64"},
		{"ipv6 /64 leaves ipv4", []Option{WithIPv6Prefix(64)}, "192.0.2.1:80", nil, "ip:192.0.2.1"},
		{"header key", []Option{WithKeyHeader("X-Client-Key")}, "192.0.2.1:1", map[string]string{"X-Client-Key": "abc"}, "key:abc"},
		{"header key fallback", []Option{WithKeyHeader("x-client-key")}, "192.0.2.1:1", nil, "ip:192.0.2.1"},
		{"header key looks like ip", []Option{WithKeyHeader("X-Client-Key")}, "192.0.2.1:1", map[string]string{"X-Client-Key": "192.0.2.9"}, "key:192.0.2.9"},
		// Credential headers are hashed (the values: printf %s abc | openssl dgst -sha256 -hmac
		// "<ratemonitor.DefaultKeySecret>", first 32 hex digits).
		{"credential header hashed", []Option{WithKeyHeader("X-Api-Key")}, "192.0.2.1:1", map[string]string{"X-Api-Key": "abc"}, "key:hmac:ac56855adaf0710b49c1f35de74369d7"},
		{"credential header fallback", []Option{WithKeyHeader("authorization")}, "192.0.2.1:1", nil, "ip:192.0.2.1"},
		{"credential like an ip", []Option{WithKeyHeader("Authorization")}, "192.0.2.1:1", map[string]string{"Authorization": "192.0.2.9"}, "key:hmac:2a0c39aed74c9823de2ec06671ab2d0d"},
		{"secret hashes any header", []Option{WithKeyHeader("Xero-Tenant-Id"), WithKeySecret([]byte("fleet-secret"))}, "192.0.2.1:1", map[string]string{"Xero-Tenant-Id": "t1"}, "key:hmac:d57236b52ca0457077a0e59b053e815f"},
		{"hashed key func", []Option{WithKeyFunc(func(*http.Request) (string, error) { return credential.Hash([]byte("fleet-secret"), "t1"), nil })}, "192.0.2.1:1", nil, "hmac:d57236b52ca0457077a0e59b053e815f"},
		{"xff ignored without trusted proxies", nil, "10.0.0.5:1", map[string]string{xff: "203.0.113.7"}, "ip:10.0.0.5"},
		{"xff via trusted proxy", []Option{WithTrustedProxies(xff, "10.0.0.0/8")}, "10.0.0.5:1", map[string]string{xff: "203.0.113.7"}, "ip:203.0.113.7"},
		{"xff spoofed leftmost", []Option{WithTrustedProxies(xff, "10.0.0.0/8")}, "10.0.0.5:1", map[string]string{xff: "198.51.100.66, 203.0.113.7"}, "ip:203.0.113.7"},
		{"xff spoofed leftmost, two proxies", []Option{WithTrustedProxies(xff, "10.0.0.0/8", "192.0.2.10")}, "10.0.0.5:1", map[string]string{xff: "1.1.1.1, 203.0.113.7, 192.0.2.10, 10.1.2.3"}, "ip:203.0.113.7"},
		{"xff from untrusted peer", []Option{WithTrustedProxies(xff, "10.0.0.0/8")}, "192.0.2.1:1", map[string]string{xff: "203.0.113.7"}, "ip:192.0.2.1"},
		{"xff all trusted", []Option{WithTrustedProxies(xff, "10.0.0.0/8")}, "10.0.0.5:1", map[string]string{xff: "10.9.9.9"}, "ip:10.0.0.5"},
		{"xff absent from trusted proxy", []Option{WithTrustedProxies(xff, "10.0.0.0/8")}, "10.0.0.5:1", nil, "ip:10.0.0.5"},
		{"xff ipv6 grouped", []Option{WithTrustedProxies(xff, "10.0.0.0/8"), WithIPv6Prefix(64)}, "10.0.0.5:1", map[string]string{xff: "2001:db8:5:6::77"}, "ip:2001:db8:5:6::/64"},
		{"forwarded via trusted proxy", []Option{WithTrustedProxies("Forwarded", "10.0.0.0/8")}, "10.0.0.5:1",
			map[string]string{"Forwarded": `for=198.51.100.66, for="[2001:db8::1]:4711";proto=https`}, "ip:2001:db8::/64"},
		{"forwarded: xff not read", []Option{WithTrustedProxies("Forwarded", "10.0.0.0/8")}, "10.0.0.5:1",
			map[string]string{xff: "198.51.100.66", "Forwarded": "for=203.0.113.7"}, "ip:203.0.113.7"},
		{"xff: forwarded not read", []Option{WithTrustedProxies(xff, "10.0.0.0/8")}, "10.0.0.5:1",
			map[string]string{"Forwarded": "for=198.51.100.66"}, "ip:10.0.0.5"},
		{"forwarded ignored without trusted proxies", nil, "10.0.0.5:1", map[string]string{"Forwarded": "for=203.0.113.7"}, "ip:10.0.0.5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := keyOf(t, limiter(t, c.opts...), c.remote, c.header); got != c.want {
				t.Errorf("key %q, want %q", got, c.want)
			}
		})
	}
}

// Two connections of one client (two ports) share an allocation; another address does not.
func TestKeyPeerSharedAcrossPorts(t *testing.T) {
	h := limiter(t).Wrap(&counting{})
	if w := serve(h, "/", "192.0.2.1:1000", nil); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	if w := serve(h, "/", "192.0.2.1:2000", nil); w.Code != http.StatusTooManyRequests {
		t.Errorf("same address, other port: %d, want 429", w.Code)
	}
	if w := serve(h, "/", "192.0.2.2:1000", nil); w.Code != http.StatusOK {
		t.Errorf("other address: %d, want 200", w.Code)
	}
}

// A client behind a trusted proxy cannot escape its allocation by writing X-Forwarded-For.
func TestKeySpoofedForwardedForCannotEscape(t *testing.T) {
	h := limiter(t, WithTrustedProxies("X-Forwarded-For", "10.0.0.0/8")).Wrap(&counting{})
	if w := serve(h, "/", "10.0.0.5:1", map[string]string{"X-Forwarded-For": "203.0.113.7"}); w.Code != http.StatusOK {
		t.Fatalf("first: %d", w.Code)
	}
	w := serve(h, "/", "10.0.0.6:1", map[string]string{"X-Forwarded-For": "198.51.100.1, 203.0.113.7"})
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("spoofed leftmost entry: %d, want 429", w.Code)
	}
}

func TestNoKeyAnswers500(t *testing.T) {
	var got []error
	onErr := WithErrorHandler(func(_ *http.Request, err error) { got = append(got, err) })
	next := &counting{}
	boom := errors.New("boom")
	for _, c := range []struct {
		name   string
		l      *Limiter
		remote string
	}{
		{"unix socket", limiter(t, onErr), "@"},
		{"empty RemoteAddr", limiter(t, onErr), ""},
		{"not an address", limiter(t, onErr, WithTrustedProxies("X-Forwarded-For", "10.0.0.0/8")), "localhost:80"},
		{"key func error", limiter(t, onErr, WithKeyFunc(func(*http.Request) (string, error) { return "", boom })), "192.0.2.1:1"},
		{"key func empty", limiter(t, onErr, WithKeyFunc(func(*http.Request) (string, error) { return "", nil })), "192.0.2.1:1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got = nil
			w := serve(c.l.Wrap(next), "/x", c.remote, nil)
			wantProblem(t, w, problemDetails{Type: "about:blank", Title: "Internal Server Error", Status: 500,
				Detail: "The server cannot tell which rate limit this request counts against.", Instance: "/x"})
			if len(got) != 1 || !errors.Is(got[0], ErrNoKey) {
				t.Errorf("error handler got %v, want one error wrapping ErrNoKey", got)
			}
			if c.name == "key func error" && !errors.Is(got[0], boom) {
				t.Errorf("error %v does not wrap the key func's", got[0])
			}
			if w.Header().Get("RateLimit") != "" || w.Header().Get("Retry-After") != "" {
				t.Errorf("fields on a key error: %v", w.Header())
			}
		})
	}
	if next.Calls.Load() != 0 {
		t.Errorf("next called on a key error")
	}
}

func TestKeyFuncGivesKey(t *testing.T) {
	l := limiter(t, WithKeyFunc(func(r *http.Request) (string, error) { return "tenant-" + r.URL.Query().Get("t"), nil }))
	if got := keyOf(t, l, "192.0.2.1:1", nil); got != "tenant-" {
		t.Errorf("key %q", got)
	}
}

// TestKeyFromProxyHeadersOddForms: behind trusted proxies, X-Forwarded-For and Forwarded in the
// forms clients and proxies write them (several fields, a port, an IPv4-mapped or zoned address,
// a quoted IPv6 one, mixed case) give the rightmost untrusted address, grouped by /64 for IPv6;
// an untrusted peer's header is ignored.
func TestKeyFromProxyHeadersOddForms(t *testing.T) {
	st, _ := newStore(t)
	s := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}))
	lim, err := New(st, s, WithTrustedProxies("X-Forwarded-For", "10.0.0.0/8", "fd00::/8"), WithIPv6Prefix(64))
	if err != nil {
		t.Fatal(err)
	}
	limF, _ := New(st, s, WithTrustedProxies("Forwarded", "10.0.0.0/8"))
	cases := []struct {
		l      *Limiter
		remote string
		xff    []string
		want   string
	}{
		{lim, "10.0.0.1:1", []string{"6.6.6.6, 2.2.2.2"}, "ip:2.2.2.2"},
		{lim, "10.0.0.1:1", []string{"6.6.6.6", "2.2.2.2"}, "ip:2.2.2.2"},
		{lim, "10.0.0.1:1", []string{"2.2.2.2, 10.0.0.9"}, "ip:2.2.2.2"},
		{lim, "10.0.0.1:1", []string{"2.2.2.2:4711"}, "ip:2.2.2.2"},
		{lim, "3.3.3.3:1", []string{"2.2.2.2"}, "ip:3.3.3.3"},
		{lim, "[::ffff:10.0.0.1]:1", []string{"2.2.2.2"}, "ip:2.2.2.2"},
		{lim, "[fd00::1%eth0]:1", []string{"2001:db8:1:2:3:4:5:6%x"}, "ip:2001:db8:1:2::/64"},
		{lim, "[2001:db8::1%eth0]:1", nil, "ip:2001:db8::/64"},
		{lim, "10.0.0.1:1", []string{"::ffff:10.0.0.7, ::ffff:2.2.2.2"}, "ip:2.2.2.2"},
		{limF, "10.0.0.1:1", []string{`for="[2001:db8::17]:4711", for=2.2.2.2;proto=http`}, "ip:2.2.2.2"},
		{limF, "10.0.0.1:1", []string{`for=6.6.6.6`, `For="2.2.2.2:80"`}, "ip:2.2.2.2"},
	}
	for _, c := range cases {
		t.Run(c.remote+" "+strings.Join(c.xff, " | "), func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				if c.l == limF {
					r.Header.Add("Forwarded", v)
				} else {
					r.Header.Add("X-Forwarded-For", v)
				}
			}
			got, err := c.l.Key(r)
			if got != c.want {
				t.Errorf("remote %s xff %q: key %q (%v), want %q", c.remote, c.xff, got, err, c.want)
			}
		})
	}
}

package middleware

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestKeysAdversarial(t *testing.T) {
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
	}
}

func TestHeadAndPanic(t *testing.T) {
	st, _ := newStore(t)
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Minute}))
	lim, _ := New(st, s)
	h := lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		w.WriteHeader(204)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/panic")
	if err == nil {
		resp.Body.Close()
	}
	req, _ := http.NewRequest("HEAD", srv.URL+"/x", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" {
		t.Errorf("HEAD after a panicking request: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestAdmitHangUpWire (a real wire, SQLite's one connection busy) is in
// cache/sqlitestore/internal/transporttest: it needs the SQLite store.

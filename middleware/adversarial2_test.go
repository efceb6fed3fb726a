package middleware

import (
	"bufio"
	"context"
	"database/sql"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
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

// Real wire: the one SQLite connection is busy; a client sends a POST and hangs up; under
// FailOpen the handler runs anyway, uncounted.
func TestFailOpenHangUpWire(t *testing.T) {
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Hour}))
	lim, _ := New(st, s, WithErrorPolicy(FailOpen))
	ran := make(chan struct{}, 10)
	srv := httptest.NewServer(lim.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran <- struct{}{} // e.g. an expensive side effect
	})))
	defer srv.Close()
	// use up the limit
	resp, err := http.Post(srv.URL+"/work", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-ran
	// the store is busy with something else for a moment (another request's transaction)
	var conn *sql.Conn
	if conn, err = st.DB().Conn(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"))
		c.Close() // hang up
	}
	time.Sleep(200 * time.Millisecond)
	conn.Close()
	time.Sleep(200 * time.Millisecond)
	// A normal client is refused, as it should be.
	c, _ := net.Dial("tcp", srv.Listener.Addr().String())
	c.Write([]byte("POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"))
	rr, _ := http.ReadResponse(bufio.NewReader(c), nil)
	c.Close()
	if len(ran) > 0 {
		t.Errorf("limit 1 per hour, used up; yet the handler ran %d more times for clients that hung up (a normal client gets %d)", len(ran), rr.StatusCode)
	}
}

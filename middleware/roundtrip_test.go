package middleware

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// The library's own client parsers read back what the middleware sends, over a real server.
func TestIETFFieldsReadBackByClientParsers(t *testing.T) {
	store, clk := newStore(t)
	s := must(rollingwindow.New(
		strategy.Rule{Limit: 3, Window: 10 * time.Second},
		strategy.Rule{Limit: 100, Window: time.Hour}))
	l, err := New(store, s)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(l.Wrap(&counting{}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func() *http.Response {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	get()
	clk.Advance(2500 * time.Millisecond)
	resp := get() // at 1003.75: two requests count, the last leaves both windows 10 s / 1 h later
	want := []headers.Policy{
		{Name: "3-per-10s", Quota: 3, Window: 10 * time.Second, Remaining: 1, Reset: 10 * time.Second},
		{Name: "100-per-3600s", Quota: 100, Window: time.Hour, Remaining: 98, Reset: time.Hour},
	}
	if got := headers.ParseIETF(resp.Header); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseIETF\n got %+v\nwant %+v", got, want)
	}
	wantSignals := []headers.Signal{
		{Window: 10 * time.Second, Remaining: 1, Limit: 3, Reset: 10 * time.Second},
		{Window: time.Hour, Remaining: 98, Limit: 100, Reset: time.Hour},
	}
	if got := headers.IETFReader(resp.Header, clk.Now()); !reflect.DeepEqual(got.Signals, wantSignals) || got.App {
		t.Errorf("IETFReader\n got %+v\nwant %+v", got, wantSignals)
	}

	get()
	resp = get() // refused: the first request leaves the 10 s window at 1011.25, 7.5 s on
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("%d, want 429", resp.StatusCode)
	}
	if d, ok := headers.RetryAfter(resp.Header, clk.Now()); !ok || d != 8*time.Second {
		t.Errorf("Retry-After %q read as %v, %v; want 8s", resp.Header.Get("Retry-After"), d, ok)
	}
	got := headers.ParseIETF(resp.Header)
	if len(got) != 2 || got[0].Remaining != 0 || got[0].Reset != 10*time.Second || got[1].Remaining != 97 {
		t.Errorf("ParseIETF after refusal: %+v", got)
	}
}

package cost

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func shopifyDoc(data int) string {
	return `{"data":{"blob":"` + strings.Repeat("x", data) + `"},"extensions":{"cost":{"requestedQueryCost":9,"actualQueryCost":8,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":992,"restoreRate":50.0}}}}`
}

// watchRead watches resp, reads it in chunks of n, and returns what done got (nil: not called)
// and the bytes read.
func watchRead(t *testing.T, resp *http.Response, n int) (*Body, []byte) {
	t.Helper()
	var got *Body
	Watch(resp, func(b Body) { got = &b })
	var out bytes.Buffer
	buf := make([]byte, n)
	for {
		k, err := resp.Body.Read(buf)
		out.Write(buf[:k])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return got, out.Bytes()
}

// TestWatchFindsCostPastMaxBodyAndGzip: Watch passes every byte to the caller; at the end the
// Shopify reader finds extensions.cost (8) in a body of MaxBody + 1 MiB (from its tail, read in
// odd chunks that wrap the ring), and in a gzip'd body.
func TestWatchFindsCostPastMaxBodyAndGzip(t *testing.T) {
	r := ShopifyGraphQL(20 * time.Second)
	big := shopifyDoc(2 * MaxBody)
	got, read := watchRead(t, response("application/json", big), 7777)
	if got == nil || got.Whole || string(read) != big {
		t.Fatalf("big body: done %v, read %d of %d bytes", got != nil, len(read), len(big))
	}
	if rep := r.ReadBody(nil, *got, now); rep.Cost != 8 || len(rep.Signals) != 1 || rep.Signals[0].Remaining != 992 {
		t.Errorf("big body: %+v, want cost 8 and remaining 992", rep)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(shopifyDoc(100)))
	zw.Close()
	resp := response("application/json", z.String(), "Content-Encoding", "gzip")
	got, read = watchRead(t, resp, 64)
	if got == nil || !bytes.Equal(read, z.Bytes()) {
		t.Fatalf("gzip'd body: done %v, the caller read other bytes", got != nil)
	}
	if rep := r.ReadBody(nil, *got, now); rep.Cost != 8 {
		t.Errorf("gzip'd body: %+v, want cost 8", rep)
	}
}

// TestWatchNotCalledWhenClosedEarly: a body closed before its end calls nothing.
func TestWatchNotCalledWhenClosedEarly(t *testing.T) {
	resp := response("application/json", shopifyDoc(100))
	called := false
	Watch(resp, func(Body) { called = true })
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	io.ReadAll(resp.Body)
	if called {
		t.Error("done was called for a body closed before its end")
	}
}

// TestWantsOnlyBodiesThatMaySayCost: the responses whose body may say a cost, and those never watched.
func TestWantsOnlyBodiesThatMaySayCost(t *testing.T) {
	head, _ := http.NewRequest(http.MethodHead, "http://x.test/", nil)
	for _, c := range []struct {
		name string
		resp *http.Response
		want bool
	}{
		{"json", response("application/json; charset=utf-8", "{}"), true},
		{"no content type", response("", "{}"), true},
		{"html", response("text/html", "<p>"), false},
		{"brotli", response("application/json", "{}", "Content-Encoding", "br"), false},
		{"101", &http.Response{StatusCode: 101, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, false},
		{"204", &http.Response{StatusCode: 204, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, false},
		{"304", &http.Response{StatusCode: 304, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, false},
		{"head", &http.Response{StatusCode: 200, Header: http.Header{}, Request: head, Body: io.NopCloser(strings.NewReader(""))}, false},
		{"no body", &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, false},
	} {
		if got := Wants(c.resp); got != c.want {
			t.Errorf("%s: Wants = %v, want %v", c.name, got, c.want)
		}
	}
}

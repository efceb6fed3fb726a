package cost

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWatchStream: a stream of server-sent events is watched (Wants), whatever its parameters;
// read to its end, done gets it whole; closed halfway, done is not called (a part of a stream
// says nothing sure), and its charge stands. Declared.ReadCost does not wait for a stream.
func TestWatchStream(t *testing.T) {
	const stream = "event: a\ndata: {\"usage\":null}\n\nevent: b\ndata: {\"usage\":{\"total_tokens\":21}}\n\n"
	resp := func(ct string) *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(stream))}
	}
	for ct, want := range map[string]bool{"text/event-stream": true, "text/event-stream; charset=utf-8": true, "text/plain": false, "text/event-streams": false} {
		if got := Wants(resp(ct)); got != want {
			t.Errorf("Wants(%q) = %v, want %v", ct, got, want)
		}
	}
	for _, half := range []bool{false, true} {
		r := resp("text/event-stream")
		calls := 0
		var got Body
		Watch(r, func(b Body) { calls++; got = b })
		if half {
			io.ReadFull(r.Body, make([]byte, len(stream)/2))
		} else {
			io.Copy(io.Discard, r.Body)
		}
		r.Body.Close()
		if want := map[bool]int{false: 1, true: 0}[half]; calls != want {
			t.Errorf("half %v: done called %d times, want %d", half, calls, want)
		}
		if !half && (string(got.Head) != stream || !got.Whole) {
			t.Errorf("done got %+v, want the whole stream", got)
		}
	}
	// ReadCost returns with the header's figures, the stream left unread
	d := declare("test", func(*http.Response, time.Time) Report { return Report{Cost: 3} },
		func(*http.Response, Body, time.Time) Report { return Report{Cost: 99} })
	r := resp("text/event-stream")
	if rep := d.ReadCost(r, time.Time{}); rep.Cost != 3 {
		t.Errorf("ReadCost of a stream: %d, want the header's 3", rep.Cost)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != stream {
		t.Errorf("the stream after ReadCost: %q", b)
	}
}

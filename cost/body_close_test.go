package cost

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestWatchCloseFiresOnlyForOneWholeValue: a body closed before io.EOF calls done only when what
// was read is exactly one complete JSON value (a json.Decoder's stop): not for half a value, not
// for two values, not for nothing read; and done is called once, not again at a later Read.
func TestWatchCloseFiresOnlyForOneWholeValue(t *testing.T) {
	doc := shopifyDoc(10)
	for _, c := range []struct {
		name string
		read int // bytes read before Close
		body string
		want bool
	}{
		{"one whole value", len(doc), doc, true},
		{"one whole value, trailing newline unread", len(doc), doc + "\n", true},
		{"half a value", len(doc) / 2, doc, false},
		{"two values", 2 * len(doc), doc + doc, false},
		{"nothing read", 0, doc, false},
	} {
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(c.body))}
		calls := 0
		var got Body
		Watch(resp, func(b Body) { calls++; got = b })
		if _, err := io.ReadFull(resp.Body, make([]byte, c.read)); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		resp.Body.Read(make([]byte, 8))
		if want := map[bool]int{true: 1, false: 0}[c.want]; calls != want {
			t.Errorf("%s: done called %d times after Close, want %d", c.name, calls, want)
		}
		if c.want && (string(got.Head) != doc || !got.Whole) {
			t.Errorf("%s: done got Head %q Whole %v, want the value read, whole", c.name, got.Head, got.Whole)
		}
	}
}

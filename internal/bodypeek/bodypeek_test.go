package bodypeek

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// maxBody is cost.MaxBody, the limit its readers peek with.
const maxBody = 1 << 20

// TestPeekBodyKeepsBody: the caller reads every byte after a peek, for a body shorter than the
// cap, one longer (not parsed: whole is false), and one whose read fails (the error comes after
// the bytes read).
func TestPeekBodyKeepsBody(t *testing.T) {
	for _, n := range []int{0, 10, maxBody, maxBody + 1, 3 * maxBody} {
		body := bytes.Repeat([]byte("x"), n)
		resp := &http.Response{Body: io.NopCloser(bytes.NewReader(body))}
		got, whole := Peek(resp, maxBody)
		if whole != (n <= maxBody) || len(got) != min(n, maxBody) {
			t.Fatalf("%d bytes: peeked %d, whole %v", n, len(got), whole)
		}
		rest, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(rest, body) {
			t.Fatalf("%d bytes: the caller read %d bytes, err %v", n, len(rest), err)
		}
	}
	boom := errors.New("connection reset")
	resp := &http.Response{Body: io.NopCloser(io.MultiReader(strings.NewReader("abc"), &failing{boom}))}
	got, whole := Peek(resp, maxBody)
	if whole || string(got) != "abc" {
		t.Fatalf("failing body: peeked %q, whole %v", got, whole)
	}
	rest, err := io.ReadAll(resp.Body)
	if string(rest) != "abc" || !errors.Is(err, boom) {
		t.Fatalf("failing body: the caller read %q, %v; want abc and the read error", rest, err)
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

package cost

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// tailBytes is how many of the last bytes of a body longer than MaxBody a Body keeps: 64 KiB,
// where a GraphQL response puts its extensions (after data).
const tailBytes = 64 << 10

// Body is what the caller read of a response body, for a BodyReader, decompressed when the
// response came gzip'd (Content-Encoding: gzip, a client that asked for it itself).
type Body struct {
	// Head is the first MaxBody bytes (all of them when Whole).
	Head []byte
	// Tail is, for a body longer than MaxBody, its last 64 KiB (nil when Whole).
	Tail []byte
	// Whole reports that Head is the whole body.
	Whole bool
}

// BodyReader is a Reader that finds the cost in the response body. ratemonitor.WithCostReport
// does not read the body for one, so that RoundTrip returns when the header has arrived, as
// net/http's Transport does: it calls ReadHead then, and ReadBody once the caller has read
// the body to its end (Watch), with what was read, or closed it having read one complete JSON
// value (a json.Decoder stops there). Any other body closed before its end is never parsed:
// the charge made before the send stands. The readers of this package are
// BodyReaders.
type BodyReader interface {
	Reader
	// ReadHead reads what the header says; its Cost is Unknown when only the body says it.
	ReadHead(resp *http.Response, now time.Time) Report
	// ReadBody reads what the body says, body being what the caller read.
	ReadBody(resp *http.Response, body Body, now time.Time) Report
}

// Wants reports whether resp may carry a cost in its body worth watching: not for a HEAD
// request, a 1xx (a 101's body is the upgraded connection), 204 or 304, a body that is an
// io.Writer (an upgraded connection), a Content-Type that is neither JSON (an absent one may
// be) nor a stream of server-sent events (text/event-stream, whose last events may carry the
// cost, as LLM APIs send usage), or a Content-Encoding other than gzip or identity.
func Wants(resp *http.Response) bool {
	if resp.Body == nil || resp.Body == http.NoBody {
		return false
	}
	if resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return false
	}
	if resp.Request != nil && resp.Request.Method == http.MethodHead {
		return false
	}
	if _, ok := resp.Body.(io.Writer); ok {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))) {
	case "", "identity", "gzip":
	default:
		return false
	}
	return isJSON(resp) || isEventStream(resp)
}

// Watch replaces resp.Body with one that yields the same bytes and, when the caller has read
// it to its end (io.EOF), calls done once with what was read, before that Read returns. A body
// closed before its end calls done, before Close closes it, only when what was read is one
// complete JSON value (json.Valid; what json.NewDecoder(body).Decode leaves read, it does not
// read on to io.EOF); done is not called for any other body closed early, or when a read
// fails: a partial body says nothing sure. It keeps at most MaxBody + 64 KiB (of a gzip'd body:
// MaxBody compressed bytes; one longer is not parsed). Close closes the original body.
func Watch(resp *http.Response, done func(Body)) {
	resp.Body = &watched{ReadCloser: resp.Body, done: done, gz: isGzip(resp)}
}

func isGzip(resp *http.Response) bool {
	return !resp.Uncompressed && strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip")
}

type watched struct {
	io.ReadCloser
	done  func(Body)
	gz    bool
	mu    sync.Mutex // a body may be read and closed from two goroutines
	c     capture
	ended bool
}

func (w *watched) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return n, err
	}
	w.c.write(p[:n], w.gz)
	var fire func(Body)
	var b Body
	switch {
	case err == io.EOF:
		w.ended = true
		fire, b = w.done, w.c.body(w.gz)
	case err != nil:
		w.ended = true
	}
	w.mu.Unlock()
	if fire != nil {
		fire(b)
	}
	return n, err
}

// Close closes the original body. A body closed before its end (io.EOF) is, most often, one a
// JSON decoder read to the end of its value and stopped (json.Decoder does not read on to
// io.EOF; a chunked body's last chunk may come later): when what was read is whole (not over
// MaxBody) and is exactly one complete JSON value (json.Valid), done is called with it before
// the body is closed, as at io.EOF. Anything else read before Close (a part of a value, two
// values) says nothing sure: done is not called.
func (w *watched) Close() error {
	w.mu.Lock()
	var fire func(Body)
	var b Body
	if !w.ended {
		w.ended = true
		if !w.c.over && len(w.c.head) > 0 {
			if b = w.c.body(w.gz); b.Whole && json.Valid(b.Head) {
				fire = w.done
			}
		}
	}
	w.mu.Unlock()
	if fire != nil {
		fire(b)
	}
	return w.ReadCloser.Close()
}

// capture keeps the first MaxBody bytes and a ring of the last tailBytes.
type capture struct {
	head  []byte
	tail  []byte // ring
	pos   int    // next write in the ring
	full  bool   // the ring has wrapped
	over  bool   // more than MaxBody bytes came
	tooGz bool   // a gzip'd body over MaxBody compressed bytes
}

func (c *capture) write(p []byte, gz bool) {
	if room := MaxBody - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return
	}
	c.over = true
	if gz {
		c.tooGz = true
		return
	}
	c.ring(p)
}

func (c *capture) ring(p []byte) {
	if c.tail == nil {
		c.tail = make([]byte, tailBytes)
	}
	if len(p) >= tailBytes {
		copy(c.tail, p[len(p)-tailBytes:])
		c.pos, c.full = 0, true
		return
	}
	k := copy(c.tail[c.pos:], p)
	if k < len(p) {
		copy(c.tail, p[k:])
		c.full = true
	}
	c.pos = (c.pos + len(p)) % tailBytes
	if c.pos == 0 {
		c.full = true
	}
}

func (c *capture) last() []byte {
	if !c.full {
		return append([]byte(nil), c.tail[:c.pos]...)
	}
	return append(append([]byte(nil), c.tail[c.pos:]...), c.tail[:c.pos]...)
}

// body returns what was captured, decompressed when gz.
func (c *capture) body(gz bool) Body {
	if !gz {
		if !c.over {
			return Body{Head: c.head, Whole: true}
		}
		return Body{Head: c.head, Tail: c.last()}
	}
	if c.tooGz {
		return Body{}
	}
	zr, err := gzip.NewReader(bytes.NewReader(c.head))
	if err != nil {
		return Body{}
	}
	var d capture
	buf := make([]byte, 32<<10)
	// a bound on the work: MaxBody compressed bytes may inflate a thousandfold
	for left := 64 * MaxBody; ; {
		n, err := zr.Read(buf)
		d.write(buf[:n], false)
		if left -= n; left < 0 {
			return Body{}
		}
		if err == io.EOF {
			return d.body(false)
		}
		if err != nil {
			return Body{}
		}
	}
}

// member finds the JSON value of the object member named name in b, trying its occurrences
// from the last (a GraphQL response ends with its extensions), and decodes it into v. It is for
// a body too long to parse whole, where b is a part of it; ok is false when no occurrence of
// "name" followed by a colon decodes into v.
func member(b []byte, name string, v any) bool {
	pat := []byte(`"` + name + `"`)
	end := len(b)
	for {
		i := bytes.LastIndex(b[:end], pat)
		if i < 0 {
			return false
		}
		end = i
		rest := bytes.TrimLeft(b[i+len(pat):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		if json.NewDecoder(bytes.NewReader(rest[1:])).Decode(v) == nil {
			return true
		}
	}
}

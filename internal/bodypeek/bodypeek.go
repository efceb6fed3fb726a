// Package bodypeek reads the start of a response body and puts back one that yields every byte,
// for the cost readers of cost and profiles that read a body before RoundTrip returns.
package bodypeek

import (
	"bytes"
	"io"
	"net/http"
)

// Peek returns the first bytes of resp's body, up to limit, and true when that is the
// whole body; it replaces resp.Body with a body that yields every byte the original did (those
// read, then the rest), and whose Close closes the original. A read error ends the peek: the
// bytes read so far are returned with false, and the caller's reads meet the same error after
// them. A nil body, or http.NoBody, gives nil and true.
func Peek(resp *http.Response, limit int) ([]byte, bool) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil, true
	}
	orig := resp.Body
	b, err := io.ReadAll(io.LimitReader(orig, int64(limit)+1))
	whole := err == nil && len(b) <= limit
	rest := io.Reader(orig)
	if err != nil {
		rest = errReader{err}
	}
	resp.Body = &peeked{Reader: io.MultiReader(bytes.NewReader(b), rest), orig: orig}
	if len(b) > limit {
		b = b[:limit]
	}
	return b, whole
}

type peeked struct {
	io.Reader
	orig io.ReadCloser
}

func (p *peeked) Close() error { return p.orig.Close() }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

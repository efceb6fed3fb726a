package headerparse

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
)

// secondaryPeek is how many bytes of a 403 or 429 body GitHubSecondary reads: GitHub's error
// documents are a message and a documentation URL.
const secondaryPeek = 4 << 10

// GitHubSecondary is headers.GitHubSecondary (documented there): it reads at most 4 KiB of a
// JSON body before returning, and puts back a body that yields every byte (a read error comes
// after the bytes read).
func GitHubSecondary(resp *http.Response) bool {
	if resp == nil || (resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests) || !secondaryCandidate(resp) {
		return false
	}
	orig := resp.Body
	b, rerr := io.ReadAll(io.LimitReader(orig, secondaryPeek))
	rest := io.Reader(orig)
	if rerr != nil {
		rest = failedReader{rerr}
	}
	resp.Body = peekedBody{Reader: io.MultiReader(bytes.NewReader(b), rest), Closer: orig}
	return bytes.Contains(bytes.ToLower(b), []byte("secondary rate limit"))
}

// GitHubSecondaryWithin is GitHubSecondary for a 403 only, waiting at most d for its body: a
// reader that must return at the header (a Transport's RoundTrip) cannot wait for a body the
// server streams slowly. The 4 KiB peek is read by a goroutine of its own; when it has not
// ended within d, GitHubSecondaryWithin returns false (the message is not known in time) and
// the goroutine goes on reading. Either way resp.Body is replaced by a body that yields every
// byte the original did, in order: its first Read waits for the peek to end. Close closes the
// original body, which ends the peek. A 429 gives false without reading anything: headers.Refused
// already says it refuses (GitHub's secondary limits answer 403 or 429). d ≤ 0 waits for
// nothing: false unless the peek has ended at once.
func GitHubSecondaryWithin(resp *http.Response, d time.Duration) bool {
	if resp == nil || resp.StatusCode != http.StatusForbidden || !secondaryCandidate(resp) {
		return false
	}
	p := &pendingPeek{orig: resp.Body, done: make(chan struct{})}
	go p.peek()
	resp.Body = p
	timer := time.NewTimer(max(d, 0))
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		select {
		case <-p.done:
		default:
			return false
		}
	}
	return bytes.Contains(bytes.ToLower(p.head), []byte("secondary rate limit"))
}

// secondaryCandidate reports whether a refusal's header leaves a secondary limit to its body:
// no Retry-After, X-RateLimit-Remaining not 0 (Refused covers both), and a JSON body to read.
func secondaryCandidate(resp *http.Response) bool {
	if strings.TrimSpace(resp.Header.Get(FieldRetryAfter)) != "" || strings.TrimSpace(resp.Header.Get(FieldXRemaining)) == "0" {
		return false
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return false
	}
	return resp.Body != nil && resp.Body != http.NoBody
}

type peekedBody struct {
	io.Reader
	io.Closer
}

type failedReader struct{ err error }

func (f failedReader) Read([]byte) (int, error) { return 0, f.err }

// pendingPeek is a body whose first secondaryPeek bytes a goroutine reads (peek); Read waits
// for it, then yields those bytes, then the rest (or the peek's read error).
type pendingPeek struct {
	orig io.ReadCloser
	done chan struct{} // closed when the peek has ended
	head []byte        // written by peek before done is closed
	r    io.Reader
}

func (p *pendingPeek) peek() {
	defer close(p.done)
	b, err := io.ReadAll(io.LimitReader(p.orig, secondaryPeek))
	p.head = b
	rest := io.Reader(p.orig)
	if err != nil {
		rest = failedReader{err}
	}
	p.r = io.MultiReader(bytes.NewReader(b), rest)
}

func (p *pendingPeek) Read(b []byte) (int, error) {
	<-p.done
	return p.r.Read(b)
}

// Close closes the original body (ending a peek still reading) and waits for the peek.
func (p *pendingPeek) Close() error {
	err := p.orig.Close()
	<-p.done
	return err
}

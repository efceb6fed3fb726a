package headers

import (
	"bytes"
	"io"
	"net/http"
	"time"
)

// GitHubSecondaryWithin is GitHubSecondary for a 403 only, waiting at most d for its body: a
// reader that must return at the header (a Transport's RoundTrip) cannot wait for a body the
// server streams slowly. The 4 KiB peek (SecondaryPeek) is read by a goroutine of its own; when
// it has not ended within d, GitHubSecondaryWithin returns false (the message is not known in
// time) and the goroutine goes on reading. Either way resp.Body is replaced by a body that
// yields every byte the original did, in order: its first Read waits for the peek to end. Close
// closes the original body, which ends the peek. A 429 gives false without reading anything:
// Refused already says it refuses (GitHub's secondary limits answer 403 or 429, the page cited
// at GitHubSecondary). d ≤ 0 waits for nothing: false unless the peek has ended at once.
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

// pendingPeek is a body whose first SecondaryPeek bytes a goroutine reads (peek); Read waits
// for it, then yields those bytes, then the rest (or the peek's read error).
type pendingPeek struct {
	orig io.ReadCloser
	done chan struct{} // closed when the peek has ended
	head []byte        // written by peek before done is closed
	r    io.Reader
}

func (p *pendingPeek) peek() {
	defer close(p.done)
	b, err := io.ReadAll(io.LimitReader(p.orig, SecondaryPeek))
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

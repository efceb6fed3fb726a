package ratemonitor

import (
	"io"
	"net/http"
	"sync"
)

// held is the in-flight slots one request holds.
type held struct {
	f     *inflight
	slots []*slot
	once  sync.Once
}

// release frees the slots, once.
func (h *held) release() {
	h.once.Do(func() {
		for _, s := range h.slots {
			h.f.release(s)
		}
	})
}

// attach makes resp's body free the slots when it is closed or read to EOF; a response with
// no body frees them now.
func (h *held) attach(resp *http.Response) *http.Response {
	if len(h.slots) == 0 {
		return resp
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		h.release()
		return resp
	}
	b := &heldBody{ReadCloser: resp.Body, h: h}
	if w, ok := resp.Body.(io.Writer); ok {
		// A 101 Switching Protocols body is an io.ReadWriteCloser: keep it one.
		resp.Body = heldRWBody{heldBody: b, w: w}
	} else {
		resp.Body = b
	}
	return resp
}

// heldBody is a response body that frees its request's in-flight slots when done.
type heldBody struct {
	io.ReadCloser
	h *held
}

// Read reads the body; at EOF the slots are freed.
func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.h.release()
	}
	return n, err
}

// Close closes the body, then frees the slots.
func (b *heldBody) Close() error {
	err := b.ReadCloser.Close()
	b.h.release()
	return err
}

type heldRWBody struct {
	*heldBody
	w io.Writer
}

func (b heldRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

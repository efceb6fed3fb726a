// Package cost reads what an upstream says a request really cost, for
// ratemonitor.WithCostReport: GraphQL points at Shopify (extensions.cost) and GitHub
// (data.rateLimit, and the X-RateLimit-* fields).
//
// A Transport charges each request the cost ratemonitor.WithCost gives before sending it;
// after the response, a Reader says what the upstream charged, and the Transport records the
// difference or gives it back. A Reader may also give the points the upstream says remain, as
// headers.Signals that ratemonitor.WithSync applies to the rule with that window.
package cost

import (
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/bodypeek"
)

// Unknown is the Cost of a response that did not say what its request cost.
const Unknown = -1

// MaxBody is the most bytes of a response body a Reader of this package parses whole to find
// the cost: 1 MiB. Of a longer body, Watch keeps the first MaxBody and the last 64 KiB (where a
// GraphQL response puts its extensions, after data), and the readers look for their member
// there (Shopify's extensions in the tail, GitHub's rateLimit in either); ReadCost, which reads
// before returning, does not parse one. Of a gzip'd body, MaxBody compressed bytes at most are
// kept. The caller always gets the body whole.
const MaxBody = 1 << 20

// Report is what one response says about the cost of its request.
type Report struct {
	// Cost is what the upstream charged for the request, in the unit the rules count (points),
	// or Unknown. 0 is a cost: the request was charged nothing.
	Cost int
	// Signals are the remaining figures the response gave, tied to rules by window, as the
	// header readers' (headers.Signal).
	Signals []headers.Signal
	// Pause is how long the response says the key must wait before its next request fits (a
	// throttled answer that says when it would, such as Shopify's THROTTLED); 0 when it does
	// not say. With ratemonitor.WithSync, the key is paused that long.
	Pause time.Duration
	// Meters is what the response says about the request's charges on other meters
	// (ratemonitor.Meter), by meter name: a Cost there corrects the request's charge on that
	// meter as Cost corrects its own (a meter that did not charge the request is charged it),
	// its Signals are about that meter's rules (by window, App ignored), and its Pause pauses
	// the meter's key. Their own Meters are not read. nil when it says nothing of them.
	Meters map[string]Report
}

// Reader reads a response's cost. now is the instant the response arrived, for figures that
// give an absolute time. A Reader never fails, and leaves the response as it found it for the
// caller: one that reads the body must put back a body that yields the same bytes (as
// Declared.ReadCost does). It may be called from many goroutines at once.
type Reader interface {
	ReadCost(resp *http.Response, now time.Time) Report
}

// ReaderFunc makes a function a Reader. It declares no windows.
type ReaderFunc func(resp *http.Response, now time.Time) Report

// ReadCost calls f.
func (f ReaderFunc) ReadCost(resp *http.Response, now time.Time) Report { return f(resp, now) }

// Declared is a Reader that declares the windows its signals name (as headers.Windowed does),
// so that ratemonitor.New refuses one whose window no rule has. The readers of this package
// return one; it is a BodyReader.
type Declared struct {
	name    string
	head    ReaderFunc
	body    func(resp *http.Response, body Body, now time.Time) Report
	windows []headers.Window
}

// ReadHead reads what resp's header says; the zero Declared reports Unknown.
func (d Declared) ReadHead(resp *http.Response, now time.Time) Report {
	if d.head == nil {
		return Report{Cost: Unknown}
	}
	return d.head(resp, now)
}

// ReadBody reads what body (what the caller read of resp's body) says; the zero Declared
// reports Unknown.
func (d Declared) ReadBody(resp *http.Response, body Body, now time.Time) Report {
	if d.body == nil {
		return Report{Cost: Unknown}
	}
	return d.body(resp, body, now)
}

// ReadCost reads the header and, when Wants(resp), the body at once: it reads up to MaxBody
// bytes of it before returning, and puts back a body that yields every byte. The
// body's figures win over the header's. ratemonitor.WithCostReport does not call it: it
// calls ReadHead and ReadBody, so as not to wait for the body.
func (d Declared) ReadCost(resp *http.Response, now time.Time) Report {
	rep := d.ReadHead(resp, now)
	if d.body == nil || !Wants(resp) || isEventStream(resp) { // a stream would be waited out
		return rep
	}
	gz := isGzip(resp)
	b, whole := bodypeek.Peek(resp, MaxBody)
	if !whole {
		return rep
	}
	c := capture{head: b}
	body := c.body(gz)
	if body.Head == nil && gz {
		return rep
	}
	br := d.ReadBody(resp, body, now)
	if br.Cost != Unknown {
		rep.Cost = br.Cost
	}
	if len(br.Signals) > 0 {
		rep.Signals = br.Signals
	}
	rep.Pause = max(rep.Pause, br.Pause)
	return rep
}

// Windows returns a copy of the declared windows.
func (d Declared) Windows() []headers.Window { return append([]headers.Window(nil), d.windows...) }

// String names the reader, for errors.
func (d Declared) String() string { return d.name }

// isJSON reports whether resp says its body is JSON, or says nothing about it.
func isJSON(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// isEventStream reports whether resp says its body is a stream of server-sent events
// (text/event-stream, HTML Living Standard, "Server-sent events").
func isEventStream(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// points rounds a number of points the upstream wrote as a JSON number up to a whole count,
// refusing negative, fractional-beyond-range and absurd values (Unknown).
func points(v *float64) int {
	if v == nil || !(*v >= 0) || *v > 1<<31 {
		return Unknown
	}
	n := int(*v)
	if float64(n) < *v {
		n++
	}
	return n
}

func declare(name string, head ReaderFunc, body func(*http.Response, Body, time.Time) Report, windows ...headers.Window) Declared {
	return Declared{name: name, head: head, body: body, windows: windows}
}

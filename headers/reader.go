package headers

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Reader turns a response's header into a Report. now is the instant the response arrived,
// for fields that give an absolute time. A Reader never fails: what it cannot read it leaves
// out. A Reader that also implements Windowed says which rules its figures can be about, so
// that ratemonitor.New can refuse one whose figures no rule would take.
type Reader interface {
	Read(h http.Header, now time.Time) Report
}

// ReaderFunc makes a plain function a Reader. It declares no windows: its figures are checked
// against the rules only when they arrive (a figure no rule takes is then dropped).
type ReaderFunc func(h http.Header, now time.Time) Report

// Read calls f.
func (f ReaderFunc) Read(h http.Header, now time.Time) Report { return f(h, now) }

// Window names a rule a reader's figures can be about: the first rule whose Window equals
// Window, of the request's key, or with App set, of the app key (ratemonitor.WithAppRules).
// Optional marks figures a Transport may lack the rules for (Xero's app-wide minute, for a
// client without app rules): ratemonitor.New does not refuse a reader for such a window, and
// its figures are dropped.
type Window struct {
	Window   time.Duration
	App      bool
	Optional bool
}

// String formats w as "1m0s", "1m0s (app)" or "1m0s (app, optional)".
func (w Window) String() string {
	var tags []string
	if w.App {
		tags = append(tags, "app")
	}
	if w.Optional {
		tags = append(tags, "optional")
	}
	if len(tags) == 0 {
		return w.Window.String()
	}
	return w.Window.String() + " (" + strings.Join(tags, ", ") + ")"
}

// Windowed is implemented by readers that know, before any response, every window their
// signals can name (Signal.Window and Signal.App). The readers of this package that take
// windows as arguments (XeroReader, XRateLimitReader, ShopifyReader, HubSpotReader) do; the
// IETF reader does not, since its windows come with each response.
type Windowed interface {
	Reader
	Windows() []Window
}

// Declared is a Reader with the windows it declares: what Declare returns, and the type of
// this package's readers that take windows. Its zero value reads nothing and declares no
// window.
type Declared struct {
	name    string
	read    ReaderFunc
	windows []Window
}

// Declare returns r as a Windowed reader whose signals name only the given windows. name
// describes it in errors, such as "XeroReader(1m0s, 24h0m0s)".
func Declare(name string, r ReaderFunc, windows ...Window) Declared {
	return Declared{name: name, read: r, windows: append([]Window(nil), windows...)}
}

// Read calls the reader given to Declare; the zero Declared returns an empty Report.
func (d Declared) Read(h http.Header, now time.Time) Report {
	if d.read == nil {
		return Report{}
	}
	return d.read(h, now)
}

// Windows returns a copy of the declared windows.
func (d Declared) Windows() []Window { return append([]Window(nil), d.windows...) }

// String returns the name given to Declare, and the windows.
func (d Declared) String() string {
	ws := make([]string, len(d.windows))
	for i, w := range d.windows {
		ws[i] = w.String()
	}
	return fmt.Sprintf("%s (windows %s)", d.name, strings.Join(ws, ", "))
}

// Package observetest has an observe.Observer for tests: Recorder keeps every event.
package observetest

import (
	"sync"

	"github.com/ratemonitor/ratemonitor/observe"
)

// Recorder is an observe.Observer that keeps every event, in the order received: for tests and
// debugging. Its zero value is ready to use; it is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []observe.Event
}

// Observe implements observe.Observer.
func (r *Recorder) Observe(e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events so far.
func (r *Recorder) Events() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observe.Event(nil), r.events...)
}

// Reset forgets the events so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}

// Strings returns the events so far, each formatted by observe.Event.String.
func (r *Recorder) Strings() []string {
	evs := r.Events()
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.String()
	}
	return out
}

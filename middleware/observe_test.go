package middleware

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestObserverOneEventPerDecision: 5 requests of one client under 3 per 10 s (fixed window) are 3
// Admitted and 2 Rejected events, with the usage of the rule after each; a key that cannot be
// found is no decision; a closed store is the store's event, not the middleware's.
func TestObserverOneEventPerDecision(t *testing.T) {
	m, _ := newStore(t)
	rec := &observetest.Recorder{}
	storeRec := &observetest.Recorder{}
	s := must(fixedwindow.New(strategy.Rule{Limit: 3, Window: 10 * time.Second}))
	l, err := New(m, s, WithObserver(rec), WithKeyFunc(func(r *http.Request) (string, error) {
		return r.Header.Get("X-Key"), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := l.Wrap(&counting{})
	for range 5 {
		serve(h, "/", "192.0.2.1:1234", map[string]string{"X-Key": "c1"})
	}
	serve(h, "/", "192.0.2.1:1234", nil) // no key: 500, not decided
	// start is 1001.25 s: the window ends 8.75 s later.
	want := []string{
		"admitted key=c1 n=1 3/10s:1/3",
		"admitted key=c1 n=1 3/10s:2/3",
		"admitted key=c1 n=1 3/10s:3/3",
		"rejected key=c1 n=1 wait=8.75s 3/10s:4/3",
		"rejected key=c1 n=1 wait=8.75s 3/10s:5/3",
	}
	if got := rec.Strings(); !slices.Equal(got, want) {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// The store's own observer hears of its failure; the middleware decides nothing.
	rec.Reset()
	closed, err := cache.NewMemory(cache.MemoryConfig{Observer: storeRec})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	l2, err := New(closed, s, WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	if code := serve(l2.Wrap(&counting{}), "/", "192.0.2.1:1234", nil).Code; code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", code)
	}
	if got := rec.Strings(); len(got) != 0 {
		t.Fatalf("middleware events %q", got)
	}
	if got, want := storeRec.Strings(), []string{"store_error store=memory op=admit key=ip:192.0.2.1 err=" + cache.ErrClosed.Error()}; !slices.Equal(got, want) {
		t.Fatalf("store events %q, want %q", got, want)
	}
}

package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
)

// passRT is a user's base RoundTripper around net/http (logging, tracing): not an
// *http.Transport, so a Transport over a shared store marks the attempts it passes it.
type passRT struct{ next http.RoundTripper }

func (p passRT) RoundTrip(r *http.Request) (*http.Response, error) { return p.next.RoundTrip(r) }

// paginate sends n requests through c, each built on the previous response's
// Request.Context() (a pagination loop carrying its context along), and returns how many
// reached the upstream.
func paginate(t *testing.T, c *http.Client, url string, n int) int {
	t.Helper()
	sent := 0
	ctx := context.Background()
	for range n {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sent++
		ctx = resp.Request.Context()
	}
	return sent
}

// Guards the count mark's lifetime (countMark.done, counted.go): a mark outlives its
// Transport's call to the base in resp.Request.Context(), and a request built on that context
// must not take it as "counted further out". Before the fix, with another Transport over the
// store (so that the first marks), 10 requests reached the upstream and 1 was counted; and a
// request through the other Transport, on the context of the first's response, went
// uncounted.
func TestReusedResponseContextCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	key := srv.Listener.Addr().String()
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "shared"}[shared], func(t *testing.T) {
			mem, err := cache.NewMemory(cache.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := New(passRT{http.DefaultTransport}, WithRules(minute), WithStore(mem))
			if err != nil {
				t.Fatal(err)
			}
			var other *Transport
			if shared {
				if other, err = New(nil, WithRules(minute), WithStore(mem)); err != nil {
					t.Fatal(err)
				}
			}
			c := &http.Client{Transport: tr}
			if sent, got := paginate(t, c, srv.URL+"/page", 10), usedOf(t, tr, key)[0]; got != 10 || sent != 10 {
				t.Errorf("shared=%v: %d requests reached the upstream, %d counted, want 10 and 10", shared, sent, got)
			}
			if shared {
				// The first client's response context, through the other client over the store.
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/once", nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if m := markFrom(resp.Request.Context()); m == nil || !m.done.Load() {
					t.Errorf("shared store: the response's request carries mark %v, want one marked done", m)
				}
				req2, _ := http.NewRequestWithContext(resp.Request.Context(), http.MethodGet, srv.URL+"/other", nil)
				resp2, err := (&http.Client{Transport: other}).Do(req2)
				if err != nil {
					t.Fatal(err)
				}
				resp2.Body.Close()
				if got := usedOf(t, tr, key)[0]; got != 12 {
					t.Errorf("after 11 through the first client and 1 through the other on its response's context: used %d, want 12", got)
				}
				other.Close()
			}
			runtime.KeepAlive(other)
			tr.Close()
			mem.Close()
		})
	}
}

// heldRT answers each request (resp.Request set, as net/http does), holding it for hold when
// set, and keeps the most requests in flight at once.
type heldRT struct {
	in, max atomic.Int32
	hold    atomic.Bool
}

func (g *heldRT) RoundTrip(r *http.Request) (*http.Response, error) {
	n := g.in.Add(1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			break
		}
	}
	if g.hold.Load() {
		time.Sleep(100 * time.Millisecond)
	}
	g.in.Add(-1)
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
}

// Guards the in-flight mark's lifetime (inflightMark.done, inflight_stack.go): requests built
// on an earlier response's request context do not skip their slot as "held further out".
// Before the fix, with another Transport over the store, WithInFlight(1) let all 3 go at once.
func TestReusedResponseContextTakesItsOwnInFlightSlot(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "shared"}[shared], func(t *testing.T) {
			mem, err := cache.NewMemory(cache.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			g := &heldRT{}
			tr, err := New(g, WithRules(minute), WithStore(mem), WithInFlight(1))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			var other *Transport
			if shared {
				if other, err = New(nil, WithRules(minute), WithStore(mem)); err != nil {
					t.Fatal(err)
				}
				defer other.Close()
			}
			req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			ctx := resp.Request.Context()
			g.hold.Store(true)
			g.max.Store(0)
			var wg sync.WaitGroup
			var failed atomic.Int32
			for range 3 {
				wg.Go(func() {
					c, cancel := context.WithTimeout(ctx, waitLimit)
					defer cancel()
					r, _ := http.NewRequestWithContext(c, http.MethodGet, "https://api.example.com/", nil)
					resp, err := tr.RoundTrip(r)
					if err != nil {
						failed.Add(1)
						return
					}
					resp.Body.Close()
				})
			}
			wg.Wait()
			if m, f := g.max.Load(), failed.Load(); m != 1 || f != 0 {
				t.Errorf("WithInFlight(1), 3 requests on an earlier response's context: %d in flight at once, %d failed; want 1 and 0", m, f)
			}
			runtime.KeepAlive(other)
		})
	}
}

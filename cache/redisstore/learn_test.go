package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
)

// serveIn serves h in process, as a RoundTripper.
type serveIn struct{ h http.Handler }

func (s serveIn) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// TestLearnedMetersOnRedis: two Transports made without rules over one Redis store (two
// processes), on a manual clock, against the IETF stand-in stating "minute";q=3;w=60 keyed by
// pk. A's first answer (r=2) teaches it the meter ietf:minute:pk:… at 1 of 3 used; A sends a
// second, paced. B's first answer (r=0) teaches it the same meter, whose counter in Redis then
// holds 3: B's next request is refused before the send (a wait of the rest of the minute), and
// so is A's. Status on both reads the same usage from Redis.
func TestLearnedMetersOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clk := clock.NewManual(t0)
	st := newStore(t, srv.Client(), Options{Prefix: "learn", Clock: clk})
	api := standin.NewIETF(clk.Now, standin.IETFPolicy{Name: "minute", Quota: 3, Window: time.Minute,
		Partition: func(*http.Request) []byte { return []byte("acct-1") }})
	var trs [2]*ratemonitor.Transport
	for i := range trs {
		tr, err := ratemonitor.New(serveIn{api}, ratemonitor.WithStore(st), ratemonitor.WithPacing())
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		trs[i] = tr
	}
	send := func(tr *ratemonitor.Transport) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second) // real time: a wait of a minute on the manual clock passes it
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/items", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for i, tr := range []*ratemonitor.Transport{trs[0], trs[0], trs[1]} {
		if code, err := send(tr); err != nil || code != 200 {
			t.Fatalf("request %d: %d %v, want 200", i, code, err)
		}
	}
	for i, tr := range trs {
		_, err := send(tr)
		var de *ratemonitor.DeadlineError
		if !errors.As(err, &de) || de.Meter != "ietf:minute" || de.Wait != time.Minute {
			t.Errorf("Transport %d, fourth request: %v, want a DeadlineError of ietf:minute, 1m0s", i, err)
		}
	}
	for i, tr := range trs {
		s, err := tr.Status(context.Background(), "api.example")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range s.Meters {
			got = append(got, fmt.Sprintf("%s %s %v used %d", m.Meter, m.Key, m.Rules[0].Rule, m.Rules[0].Used))
		}
		if want := "[ietf:minute ietf:minute:pk:YWNjdC0x 3/1m0s used 3]"; fmt.Sprint(got) != want {
			t.Errorf("Transport %d: Status meters %v, want %v", i, got, want)
		}
	}
	if n, _, _ := api.Accepted(); n != 3 || api.Refused() != 0 {
		t.Errorf("stand-in accepted %d, refused %d; want 3, 0", n, api.Refused())
	}
}

// checkLimits: PutLimits replaces a key's value, Limits reads it back (nil for a key never put),
// a ttl expires it, a negative ttl is refused.
func checkLimits(t *testing.T, st *Store) {
	ctx := context.Background()
	for _, v := range []string{"one", "two"} {
		if err := st.PutLimits(ctx, "tenant-1", []byte(v), 0); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Limits(ctx, "tenant-1"); err != nil || string(got) != v {
			t.Fatalf("Limits = %q, %v; want %q", got, err, v)
		}
	}
	if got, err := st.Limits(ctx, "never"); got != nil || err != nil {
		t.Errorf("a key never put: %q, %v; want nil, nil", got, err)
	}
	if err := st.PutLimits(ctx, "brief", []byte("x"), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, err := st.Limits(ctx, "brief")
		if err != nil {
			t.Fatal(err)
		}
		if got == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a value put for 20 ms still there after 5 s")
		}
	}
	if err := st.PutLimits(ctx, "k", []byte("x"), -time.Second); err == nil {
		t.Error("a negative ttl was accepted")
	}
}

// TestLimitsOnRedis: checkLimits on one Redis; after Close both return cache.ErrClosed.
func TestLimitsOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{Prefix: "limits"})
	checkLimits(t, st)
	st.Close()
	if err := st.PutLimits(context.Background(), "k", nil, 0); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("PutLimits after Close: %v, want cache.ErrClosed", err)
	}
}

// TestLearnedPolicySharedOnRedis: A, made without rules over Redis, learns "minute" (3 a
// minute by pk) from its answer and writes it to Redis; B, over its own Store value on the
// same Redis (another process), paces its first request on it, with no answer of its own:
// Status on B reads the meter at 2 used (A's 1, B's 1) before B's answer comes back.
func TestLearnedPolicySharedOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	api := standin.NewIETF(clk.Now, standin.IETFPolicy{Name: "minute", Quota: 3, Window: time.Minute,
		Partition: func(*http.Request) []byte { return []byte("acct-1") }})
	a, err := ratemonitor.New(serveIn{api}, ratemonitor.WithStore(newStore(t, srv.Client(), Options{Prefix: "share", Clock: clk})), ratemonitor.WithPacing(), ratemonitor.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var b *ratemonitor.Transport
	seen := ""
	probe := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		s, err := b.Status(context.Background(), "api.example")
		if err == nil && len(s.Meters) == 1 {
			seen = fmt.Sprintf("%s %v used %d", s.Meters[0].Key, s.Meters[0].Rules[0].Rule, s.Meters[0].Rules[0].Used)
		}
		return serveIn{api}.RoundTrip(req)
	})
	b, err = ratemonitor.New(probe, ratemonitor.WithStore(newStore(t, srv.Client(), Options{Prefix: "share", Clock: clk})), ratemonitor.WithPacing(), ratemonitor.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tr := range []*ratemonitor.Transport{a, b} {
		req, _ := http.NewRequest(http.MethodGet, "https://api.example/items", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if want := "ietf:minute:pk:YWNjdC0x 3/1m0s used 2"; seen != want {
		t.Errorf("B's meter when its first request was sent: %q, want %q", seen, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

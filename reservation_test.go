package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// sendNow sends one paced request on key with ctx and fails the test if it does not go at
// once: if it sleeps on the clock (the manual clock never moves here, so a wait never ends) or
// stays queued on its key for 5 s of real time (a request passes through its key's queue on
// the way when there are app rules, so a moment in it is no wait; 5 s is generous so that a
// loaded machine does not fail it). It is then cancelled, so the test cannot hang.
func sendNow(t *testing.T, tr *Transport, clk *clock.Manual, ctx context.Context, key string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sleepers := clk.Sleepers()
	done := make(chan error, 1)
	go func() { done <- doKey(tr, ctx, key) }()
	var queuedSince time.Time
	for deadline := time.Now().Add(waitLimit); ; time.Sleep(time.Millisecond) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		q, s := tr.Queued(key), clk.Sleepers()
		if q == 0 {
			queuedSince = time.Time{}
		} else if queuedSince.IsZero() {
			queuedSince = time.Now()
		}
		if (q > 0 && time.Since(queuedSince) > 5*time.Second) || s > sleepers || time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the request on %q does not go at once: %d queued on its key, %d asleep on the clock (%d before)", key, q, s, sleepers)
		}
	}
}

// TestReservationSpendsItsSlotsAndCancelReturnsTheRest: requests sent with a Reservation's
// context spend its slots instead of being counted again; Cancel gives back the slots not
// spent (once: a second Cancel changes nothing); a request on a spent reservation, or on one
// for another key, is counted as usual; a reservation above the limit, or of 0, is refused.
func TestReservationSpendsItsSlotsAndCancelReturnsTheRest(t *testing.T) {
	clk := clock.NewManual(t0)
	srv, hits := upstreamtest.Counting(t, nil)
	key := strings.TrimPrefix(srv.URL, "http://")
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 10, Window: time.Minute}), WithPacing(), WithClock(clk))
	ctx := context.Background()
	r, err := tr.Reserve(ctx, key, 5)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	for range 2 {
		req, _ := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if u := usedOf(t, tr, key)[0]; u != 5 || r.Remaining() != 3 || hits.Load() != 2 {
		t.Fatalf("after 2 sends on a reservation of 5: used %d, remaining %d, hits %d", u, r.Remaining(), hits.Load())
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if u := usedOf(t, tr, key)[0]; u != 2 {
		t.Errorf("after Cancel: used %d, want 2 (spent slots stay counted)", u)
	}
	if err := r.Cancel(ctx); err != nil || usedOf(t, tr, key)[0] != 2 {
		t.Errorf("second Cancel changed the count")
	}
	req, _ := http.NewRequestWithContext(r.Context(ctx), http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u := usedOf(t, tr, key)[0]; u != 3 {
		t.Errorf("a request on a spent reservation must be counted as usual: used %d, want 3", u)
	}
	// A reservation for another key is ignored.
	r2, _ := tr.Reserve(ctx, "other", 1)
	req, _ = http.NewRequestWithContext(r2.Context(ctx), http.MethodGet, srv.URL, nil)
	resp, _ = c.Do(req)
	resp.Body.Close()
	if u := usedOf(t, tr, key)[0]; u != 4 || r2.Remaining() != 1 {
		t.Errorf("used %d, other reservation remaining %d", u, r2.Remaining())
	}
	if _, err := tr.Reserve(ctx, key, 11); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("reserve 11 of 10: %v", err)
	}
	if _, err := tr.Reserve(ctx, key, 0); !errors.Is(err, strategy.ErrInvalidBurst) {
		t.Errorf("reserve 0: %v", err)
	}
}

// TestReservationStopsCounting: a reserved slot is spent without a second count up to, and
// not at, the instant the reservation's slots stop counting (the clock before the reserve plus
// the shortest effective window of the key's and the app key's rules); from then on a request
// carrying the reservation is recorded anew on both keys and the slot is not spent.
func TestReservationStopsCounting(t *testing.T) {
	for _, c := range []struct {
		name      string
		key, app  strategy.Rule
		until     time.Duration // the shortest effective window
		keyAfter  int           // the key's count once the request after until is recorded
		appAfter  int           // the app key's count then
		keyCancel int           // the key's count after Cancel gives back the 4 unsent slots
		appCancel int           // the app key's count then
	}{
		// The key's rule is the shortest: its reserved slots have expired, the app's still count.
		{"key rule shortest", strategy.Rule{Limit: 5, Window: time.Minute}, strategy.Rule{Limit: 100, Window: time.Hour},
			time.Minute, 1, 6, 2, 3},
		// The app's rule, margin included, is the shortest: the key's hour still counts the five.
		{"app rule shortest", strategy.Rule{Limit: 10, Window: time.Hour}, strategy.Rule{Limit: 5, Window: 50 * time.Second, Margin: 10 * time.Second},
			time.Minute, 6, 1, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, up, clk := appSetup(t, c.key, c.app)
			ctx := context.Background()
			r, err := tr.Reserve(ctx, "k", 5)
			if err != nil {
				t.Fatal(err)
			}
			if !r.until.Equal(t0.Add(c.until)) {
				t.Fatalf("reservation counts until %v, want %v", r.until.Sub(t0), c.until)
			}
			counts := func(step string, key, app, left, sent int) {
				t.Helper()
				s, err := tr.Status(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if s.Rules[0].Used != key || s.Meters[0].Rules[0].Used != app || r.Remaining() != left || up.count() != sent {
					t.Fatalf("%s: k counts %d, app %d, %d slots left, %d sent; want %d, %d, %d, %d",
						step, s.Rules[0].Used, s.Meters[0].Rules[0].Used, r.Remaining(), up.count(), key, app, left, sent)
				}
			}
			counts("reserved", 5, 5, 5, 0)

			// The last instant the slots count: a slot is spent, nothing is recorded again.
			clk.Set(t0.Add(c.until - time.Nanosecond))
			sendNow(t, tr, clk, r.Context(ctx), "k")
			counts("just before the slots stop counting", 5, 5, 4, 1)

			// From then on the request is recorded anew, on both keys, and no slot is spent.
			clk.Set(t0.Add(c.until))
			sendNow(t, tr, clk, r.Context(ctx), "k")
			counts("once the slots stopped counting", c.keyAfter, c.appAfter, 4, 2)
			sendNow(t, tr, clk, r.Context(ctx), "k")
			counts("a second request after", c.keyAfter+1, c.appAfter+1, 4, 3)

			// Cancel still gives back the 4 slots never sent where they count (the longer rule);
			// on the shortest rule they have expired and nothing more is taken off.
			if err := r.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			counts("after Cancel", c.keyCancel, c.appCancel, 0, 3)
		})
	}
}

package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// threeMeters is GitHub's shape with an app meter on top: 100 requests a minute per token on
// the key; points (10 a minute per token, POST 5); content-generating writes (2 a minute per
// token, GETs not charged); and the app (6 a minute across every token).
func threeMeters(t *testing.T, opts ...Option) (*Transport, *clockBase, *clock.Manual) {
	minute := func(n int) []strategy.Rule { return []strategy.Rule{{Limit: n, Window: time.Minute}} }
	tr, b, clk := meterSetup(t, strategy.Rule{Limit: 100, Window: time.Minute},
		Meter{Name: "points", Rules: minute(10), Cost: pointsByMethod},
		append([]Option{
			WithMeter(Meter{Name: "content", Rules: minute(2), Cost: func(r *http.Request) int {
				if r.Method == http.MethodGet {
					return 0
				}
				return 1
			}}),
			WithAppRules("app", minute(6)...),
		}, opts...)...)
	return tr, b, clk
}

// used returns what key holds on its own rules and on each meter, in the meters' order.
func used(t *testing.T, tr *Transport, key string) []int {
	t.Helper()
	st, err := tr.Status(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	u := []int{st.Rules[0].Used}
	for _, m := range st.Meters {
		u = append(u, m.Rules[0].Used)
	}
	return u
}

// TestThreeMetersChargeEachRequestOnEveryMeterThatApplies: in monitoring and pacing mode, a GET
// costs 1 on the key, 1 point and 1 on the app; a POST 1, 5 points, 1 content and 1 on the app.
func TestThreeMetersChargeEachRequestOnEveryMeterThatApplies(t *testing.T) {
	for _, paced := range []bool{false, true} {
		var opts []Option
		if paced {
			opts = append(opts, WithPacing())
		}
		tr, b, _ := threeMeters(t, opts...)
		ctx := context.Background()
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodGet} {
			if _, err := tr.RoundTrip(tokenRequest(ctx, m, "a")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tr.RoundTrip(tokenRequest(ctx, http.MethodPost, "b")); err != nil {
			t.Fatal(err)
		}
		// key, points, content, app
		if got, want := used(t, tr, "a"), []int{3, 7, 1, 4}; !equalInts(got, want) || b.count() != 4 {
			t.Errorf("paced %v: token a holds %v, want %v; sent %d, want 4", paced, got, want, b.count())
		}
		if got, want := used(t, tr, "b"), []int{1, 5, 1, 4}; !equalInts(got, want) {
			t.Errorf("paced %v: token b holds %v, want %v", paced, got, want)
		}
	}
}

// TestThreeMetersTakeAllOrNothing: a paced request whose last meter is full holds nothing
// while it waits (the key's slot and the first meters' are given back), and takes every
// charge at the same instant once all fit.
func TestThreeMetersTakeAllOrNothing(t *testing.T) {
	tr, b, clk := threeMeters(t, WithPacing())
	ctx := context.Background()
	// Two POSTs of token a fill its content meter (2 a minute).
	for range 2 {
		if _, err := tr.RoundTrip(tokenRequest(ctx, http.MethodPost, "a")); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(tokenRequest(ctx, http.MethodPost, "a"))
		done <- err
	}()
	waitSleepers(t, clk, 1)
	// key, points, content, app: only the two sent.
	if got, want := used(t, tr, "a"), []int{2, 10, 2, 2}; !equalInts(got, want) {
		t.Fatalf("while the third POST waits, token a holds %v, want %v (nothing held)", got, want)
	}
	clk.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := used(t, tr, "a"), []int{1, 5, 1, 1}; !equalInts(got, want) || b.count() != 3 {
		t.Errorf("a minute later token a holds %v, want %v; sent %d, want 3", got, want, b.count())
	}
}

// TestMeterViewAnswersPerMeter: Transport.Meter answers AllocationUsed and WaitSeconds for one
// meter, in its unit; a name no meter has is an error naming the meters.
func TestMeterViewAnswersPerMeter(t *testing.T) {
	tr, _, _ := threeMeters(t)
	ctx := context.Background()
	for range 2 {
		if _, err := tr.RoundTrip(tokenRequest(ctx, http.MethodPost, "a")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		meter        string
		used, remain int
		waitFor1     int
	}{{"points", 10, 0, 60}, {"content", 2, 0, 60}, {"app", 2, 4, 0}} {
		u, err := tr.Meter(c.meter).AllocationUsed(ctx, "a")
		if err != nil || len(u) != 1 || u[0].Used != c.used || u[0].Remaining != c.remain {
			t.Errorf("Meter(%q).AllocationUsed = %+v, %v; want %d used, %d remaining", c.meter, u, err, c.used, c.remain)
		}
		if s, err := tr.Meter(c.meter).WaitSeconds(ctx, "a", 1); err != nil || s != c.waitFor1 {
			t.Errorf("Meter(%q).WaitSeconds(1) = %d, %v; want %d", c.meter, s, err, c.waitFor1)
		}
	}
	if s, err := tr.WaitSeconds(ctx, "a", 1); err != nil || s != 60 {
		t.Errorf("WaitSeconds(1) = %d, %v; want 60, the longest of the key's and the meters'", s, err)
	}
	if _, err := tr.Meter("points").WaitSeconds(ctx, "a", 11); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("Meter(points).WaitSeconds(11) error %v, want strategy.ErrBurstTooLarge", err)
	}
	_, err := tr.Meter("tokens").AllocationUsed(ctx, "a")
	if want := `no meter named "tokens": the meters are ["points" "content" "app"]`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Meter(tokens): %v, want an error saying %q", err, want)
	}
	if _, err := (&Transport{}).Meter("points").WaitSeconds(ctx, "a", 1); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("the zero Transport's meter: %v, want ErrNotConfigured", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDeadlineErrorNamesTheFullMeter: a paced request whose wait past its deadline is a meter's
// gets a *DeadlineError naming that meter; when the key's own wait is as long, no meter.
func TestDeadlineErrorNamesTheFullMeter(t *testing.T) {
	tr, b, _ := threeMeters(t, WithPacing())
	for range 6 { // six GETs of token a fill the app meter (6 a minute), no other of token b's
		if _, err := tr.RoundTrip(tokenRequest(context.Background(), http.MethodGet, "a")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx, cancel2 := context.WithDeadline(ctx, time.Now().Add(30*time.Second))
	defer cancel2()
	_, err := tr.RoundTrip(tokenRequest(ctx, http.MethodGet, "b"))
	var de *DeadlineError
	if !errors.As(err, &de) || de.Meter != "app" || de.Key != "b" || de.Wait != time.Minute {
		t.Fatalf("RoundTrip: %v; want a *DeadlineError for meter app, key b, a wait of 1m", err)
	}
	if want := `ratemonitor: 1 request(s) on key "b" need a wait of 1m0s for meter "app", past the context's deadline`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// Token a's key full too (100 a minute), for as long: the key's own rules are named first.
	if err := tr.store.Record(context.Background(), tr.strat, "a", 94); err != nil {
		t.Fatal(err)
	}
	_, err = tr.RoundTrip(tokenRequest(ctx, http.MethodGet, "a"))
	if !errors.As(err, &de) || de.Meter != "" || de.Key != "a" || de.Wait != time.Minute {
		t.Fatalf("RoundTrip of a: %v; want a *DeadlineError for key a's own rules, a wait of 1m", err)
	}
	if b.count() != 6 {
		t.Errorf("sent %d, want 6", b.count())
	}
}

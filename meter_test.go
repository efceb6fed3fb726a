package ratemonitor

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// pointsByMethod is GitHub's secondary cost: a write 5 points, anything else 1.
func pointsByMethod(req *http.Request) int {
	switch req.Method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		return 5
	}
	return 1
}

// meterSetup is a Transport with one rule on the request's key and meter m, over a memory store
// on a manual clock, keyed by the X-Token header.
func meterSetup(t *testing.T, key strategy.Rule, m Meter, opts ...Option) (*Transport, *clockBase, *clock.Manual) {
	return onManualClock(t, append([]Option{WithRules(key), WithMeter(m),
		WithKeyFunc(func(r *http.Request) string { return r.Header.Get("X-Token") })}, opts...)...)
}

func tokenRequest(ctx context.Context, method, token string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, method, "http://api.test/repos", nil)
	req.Header.Set("X-Token", token)
	return req
}

// TestMeterChargesEachRequestItsOwnCost: a request costs 1 on the key's rules and what the
// meter's Cost says on the meter, under the meter's key for the request's key (its name and
// the key, by default), in monitoring and in pacing mode; each token's meter is its own.
func TestMeterChargesEachRequestItsOwnCost(t *testing.T) {
	for _, paced := range []bool{false, true} {
		name := "monitoring"
		var opts []Option
		if paced {
			name, opts = "paced", []Option{WithPacing()}
		}
		t.Run(name, func(t *testing.T) {
			tr, b, _ := meterSetup(t, strategy.Rule{Limit: 5000, Window: time.Hour},
				Meter{Name: "points", Rules: []strategy.Rule{{Limit: 900, Window: time.Minute}}, Cost: pointsByMethod}, opts...)
			ctx := context.Background()
			for i := range 10 {
				method := http.MethodGet
				if i%5 == 4 {
					method = http.MethodPost
				}
				if _, err := tr.RoundTrip(tokenRequest(ctx, method, "a")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := tr.RoundTrip(tokenRequest(ctx, http.MethodDelete, "b")); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				token, meterKey  string
				requests, points int
			}{{"a", "points:a", 10, 8 + 2*5}, {"b", "points:b", 1, 5}} {
				st, err := tr.Status(ctx, c.token)
				if err != nil {
					t.Fatal(err)
				}
				if st.Rules[0].Used != c.requests || len(st.Meters) != 1 || st.Meters[0].Key != c.meterKey || st.Meters[0].Rules[0].Used != c.points {
					t.Errorf("token %s: %d requests on its key; meter %+v; want %d requests, and %d points on %s", c.token, st.Rules[0].Used, st.Meters, c.requests, c.points, c.meterKey)
				}
			}
			if b.count() != 11 {
				t.Errorf("the upstream saw %d requests, want 11", b.count())
			}
		})
	}
}

// TestMeterPacesUntilEveryChargeFits: a paced request waits until both its key and the meter
// have room, and holds neither while it waits. Points 10 a minute and POSTs of 5: two go at
// once, the third a minute after the first, although the key allows 100 a minute; the key
// counts only the requests sent.
func TestMeterPacesUntilEveryChargeFits(t *testing.T) {
	tr, b, clk := meterSetup(t, strategy.Rule{Limit: 100, Window: time.Minute},
		Meter{Name: "points", Rules: []strategy.Rule{{Limit: 10, Window: time.Minute}}, Cost: pointsByMethod}, WithPacing())
	ctx := context.Background()
	done := make(chan error, 1)
	for range 2 {
		if _, err := tr.RoundTrip(tokenRequest(ctx, http.MethodPost, "a")); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		_, err := tr.RoundTrip(tokenRequest(ctx, http.MethodPost, "a"))
		done <- err
	}()
	waitSleepers(t, clk, 1)
	if st, _ := tr.Status(ctx, "a"); st.Rules[0].Used != 2 || st.Meters[0].Rules[0].Used != 10 {
		t.Fatalf("while the third waits: %d on the key and %d points, want 2 and 10 (nothing held)", st.Rules[0].Used, st.Meters[0].Rules[0].Used)
	}
	clk.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.sent) != 3 || b.sent[2].Sub(t0) != time.Minute {
		t.Errorf("sent at %v, want two at t0 and the third at t0+1m", b.sent)
	}
}

// TestMeterRefusesBadSettingsAndCosts: New says what is wrong with a meter; a request whose
// meter cost is below 1, above what the meter allows, or whose cost function panics is not
// sent, and nothing is counted.
func TestMeterRefusesBadSettingsAndCosts(t *testing.T) {
	minute := []strategy.Rule{{Limit: 10, Window: time.Minute}}
	for _, c := range []struct {
		name string
		opts []Option
		want string
	}{
		{"no name", []Option{WithMeter(Meter{Rules: minute})}, "the meter has no name"},
		{"no rules", []Option{WithMeter(Meter{Name: "points"})}, `WithMeter("points"): no rules`},
		{"bad rule", []Option{WithMeter(Meter{Name: "points", Rules: []strategy.Rule{{Window: time.Minute}}})}, `WithMeter("points"): invalid rule`},
		{"two meters of one name", []Option{WithMeter(Meter{Name: "points", Rules: minute}), WithMeter(Meter{Name: "points", Rules: minute})}, `WithMeter("points"): a meter named "points" is already set`},
		{"app key and key func", []Option{WithMeter(Meter{Name: "points", AppKey: "app", Key: func(k string) string { return "p/" + k }, Rules: minute})}, `WithMeter("points"): both AppKey and Key are set`},
		{"app in flight on a meter of keys", []Option{WithMeter(Meter{Name: "points", Rules: minute}), WithAppInFlight(1)}, "WithAppInFlight(1) needs WithAppRules (or a Meter with an AppKey)"},
		{"app rules twice", []Option{WithAppRules("app", minute...), WithAppRules("app2", minute...)}, `WithAppRules: a meter named "app" is already set`},
		{"nine meters", nineMeters(minute), "more than 8 meters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(nil, append([]Option{WithRules(minute...)}, c.opts...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want an error saying %q", err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name string
		cost func(*http.Request) int
		want string
	}{
		{"cost below 0", func(*http.Request) int { return -1 }, `request cost -1 on meter "points", key "points:a"`},
		{"cost over the limit", func(*http.Request) int { return 11 }, `request cost 11 on meter "points", key "points:a"`},
		{"cost panics", func(*http.Request) int { panic("no") }, `meter "points": not sent: the cost function panicked`},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, b, _ := meterSetup(t, strategy.Rule{Limit: 100, Window: time.Minute}, Meter{Name: "points", Rules: minute, Cost: c.cost}, WithPacing())
			_, err := tr.RoundTrip(tokenRequest(context.Background(), http.MethodGet, "a"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("RoundTrip: %v, want an error saying %q", err, c.want)
			}
			if st, _ := tr.Status(context.Background(), "a"); b.count() != 0 || st.Rules[0].Used != 0 || st.Meters[0].Rules[0].Used != 0 {
				t.Errorf("sent %d, counted %d on the key and %d on the meter; want nothing", b.count(), st.Rules[0].Used, st.Meters[0].Rules[0].Used)
			}
		})
	}
}

// TestMeterKeyIsTheMetersOwn: a meter's key is AppKey for every request, or Key's for the
// request's key, or its name and the request's key; AppKey reports only the first.
func TestMeterKeyIsTheMetersOwn(t *testing.T) {
	minute := []strategy.Rule{{Limit: 10, Window: time.Minute}}
	for _, c := range []struct {
		meter  Meter
		want   string
		appKey string
		isApp  bool
	}{
		{Meter{Name: "app", AppKey: "xero-app:1", Rules: minute}, "xero-app:1", "xero-app:1", true},
		{Meter{Name: "points", Key: func(k string) string { return "gh-points/" + k }, Rules: minute}, "gh-points/a", "", false},
		{Meter{Name: "points", Rules: minute}, "points:a", "", false},
	} {
		tr, _, _ := meterSetup(t, strategy.Rule{Limit: 100, Window: time.Minute}, c.meter)
		if _, err := tr.RoundTrip(tokenRequest(context.Background(), http.MethodGet, "a")); err != nil {
			t.Fatal(err)
		}
		st, err := tr.Status(context.Background(), "a")
		if err != nil || st.Meters[0].Key != c.want || st.Meters[0].Rules[0].Used != 1 {
			t.Errorf("%+v: meter status %+v, %v; want 1 counted on %s", c.meter, st.Meters, err, c.want)
		}
		if k, ok := tr.AppKey(); k != c.appKey || ok != c.isApp {
			t.Errorf("AppKey() = %q, %v; want %q, %v", k, ok, c.appKey, c.isApp)
		}
	}
}

func nineMeters(rules []strategy.Rule) []Option {
	var opts []Option
	for i := range 9 {
		opts = append(opts, WithMeter(Meter{Name: fmt.Sprint("m", i), Rules: rules}))
	}
	return opts
}

// TestMeterCostZeroLeavesTheMeterOut: a Meter.Cost of 0 says the meter does not apply to the
// request: it is sent, counted on its key and on the meters that apply, and not on that one.
func TestMeterCostZeroLeavesTheMeterOut(t *testing.T) {
	minute := []strategy.Rule{{Limit: 10, Window: time.Minute}}
	writes := func(r *http.Request) int {
		if r.Method == http.MethodGet {
			return 0
		}
		return 1
	}
	for _, pacing := range []bool{false, true} {
		opts := []Option{WithMeter(Meter{Name: "content", Rules: minute, Cost: writes})}
		if pacing {
			opts = append(opts, WithPacing())
		}
		tr, b, _ := meterSetup(t, strategy.Rule{Limit: 100, Window: time.Minute}, Meter{Name: "points", Rules: minute}, opts...)
		ctx := context.Background()
		for _, m := range []string{http.MethodGet, http.MethodGet, http.MethodPost} {
			if _, err := tr.RoundTrip(tokenRequest(ctx, m, "a")); err != nil {
				t.Fatal(err)
			}
		}
		st, err := tr.Status(ctx, "a")
		if err != nil || b.count() != 3 || st.Rules[0].Used != 3 || st.Meters[0].Rules[0].Used != 3 || st.Meters[1].Rules[0].Used != 1 {
			t.Errorf("pacing %v: sent %d, %+v, %v; want 3 sent, 3 on the key, 3 points and 1 content", pacing, b.count(), st, err)
		}
	}
}

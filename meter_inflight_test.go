package ratemonitor_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rm "github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestInFlightCapsOnOneKeyRefused: two in-flight caps on one store key would have each request
// take a lease under each; requests holding the first and waiting for the second would wait on
// each other until their contexts end. New refuses them: two meters on one AppKey, and an app
// meter's InFlight with WithAppInFlight.
func TestInFlightCapsOnOneKeyRefused(t *testing.T) {
	rules := rm.WithRules(strategy.Rule{Limit: 1000, Window: time.Minute})
	for _, c := range []struct {
		opts []rm.Option
		want string
	}{
		{[]rm.Option{rm.WithMeter(rm.Meter{Name: "a", AppKey: "app", InFlight: 3}), rm.WithMeter(rm.Meter{Name: "b", AppKey: "app", InFlight: 3})},
			`WithMeter("b"): the app key "app" is meter "a"'s already`},
		{[]rm.Option{rm.WithMeter(rm.Meter{Name: "app", AppKey: "app", Rules: []strategy.Rule{{Limit: 1000, Window: time.Minute}}, InFlight: 2}), rm.WithAppInFlight(4)},
			`WithAppInFlight(4): the app meter "app" has InFlight 2 already`},
		{[]rm.Option{rm.WithMeter(rm.Meter{Name: "app", AppKey: "app", InFlight: 5}), rm.WithAppInFlight(3)},
			`WithAppInFlight(3): the app meter "app" has InFlight 5 already`},
	} {
		tr, err := rm.New(nil, append([]rm.Option{rules}, c.opts...)...)
		if err == nil {
			tr.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error saying %q", err, c.want)
		}
	}
}

// TestInFlightMeterCapsOnlyTheRequestsItApplies: a meter whose Cost is 0 for GETs does not
// apply to them, its InFlight cap included: with InFlight 1, three GETs are in progress at once
// (the upstream holds each until all three have arrived, or 10 s).
func TestInFlightMeterCapsOnlyTheRequestsItApplies(t *testing.T) {
	var mu sync.Mutex
	arrived, most := 0, 0
	all := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		most = max(most, arrived)
		if arrived == 3 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	tr, err := rm.New(nil, rm.WithRules(strategy.Rule{Limit: 1000, Window: time.Minute}),
		rm.WithMeter(rm.Meter{Name: "writes", AppKey: "writes", Rules: []strategy.Rule{{Limit: 100, Window: time.Minute}}, InFlight: 1,
			Cost: func(r *http.Request) int {
				if r.Method == http.MethodGet {
					return 0
				}
				return 1
			}}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp, err := (&http.Client{Transport: tr}).Get(s.URL)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if most != 3 {
		t.Errorf("at most %d GETs in progress at once, want 3: the meter's InFlight 1 held requests it does not apply to", most)
	}
}

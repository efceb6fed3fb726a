package ratemonitor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rm "github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func okServer(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(s.Close)
	return s
}

var minuteRules = []strategy.Rule{{Limit: 100, Window: time.Minute}}

// rt runs one request through tr, turning a panic into an error.
func rt(tr http.RoundTripper, method, url string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PANIC: %v", p)
		}
	}()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// TestMeterKeyPanicOrEmptyIsAnError: a Meter.Key that panics, or returns "", is an error
// naming the meter, in both modes; nothing is sent or counted.
func TestMeterKeyPanicOrEmptyIsAnError(t *testing.T) {
	s := okServer(t)
	for _, key := range []func(string) string{func(string) string { panic("boom") }, func(string) string { return "" }} {
		for _, paced := range []bool{false, true} {
			opts := []rm.Option{rm.WithRules(minuteRules...), rm.WithMeter(rm.Meter{Name: "m", Rules: minuteRules, Key: key})}
			if paced {
				opts = append(opts, rm.WithPacing())
			}
			tr, err := rm.New(nil, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			err = rt(tr, http.MethodGet, s.URL)
			if want := `ratemonitor: meter "m": not sent: its Key func returned "" or panicked`; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("paced %v: %v, want an error saying %q", paced, err, want)
			}
			if u, _ := tr.AllocationUsed(context.Background(), strings.TrimPrefix(s.URL, "http://")); u[0].Used != 0 {
				t.Errorf("paced %v: %d counted on the key, want 0", paced, u[0].Used)
			}
		}
	}
}

// TestTwoMetersOnOneAppKeyRefused: two meters with the same AppKey would count in one counter
// (a request charged twice there): New refuses the second.
func TestTwoMetersOnOneAppKeyRefused(t *testing.T) {
	_, err := rm.New(nil, rm.WithRules(minuteRules...),
		rm.WithMeter(rm.Meter{Name: "a", AppKey: "app", Rules: []strategy.Rule{{Limit: 10, Window: time.Minute}}}),
		rm.WithMeter(rm.Meter{Name: "b", AppKey: "app", Rules: []strategy.Rule{{Limit: 50, Window: time.Minute}}}))
	if want := `ratemonitor: WithMeter("b"): the app key "app" is meter "a"'s already`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("New: %v, want an error saying %q", err, want)
	}
}

// TestMeterBadInputGivesClearErrors: too many meters, a name taken (by a meter with rules or
// one with only InFlight), the meters' answers on a zero or nil Transport and for a meter of
// InFlight only, and costs or bursts no rule can take: each is an error saying what is wrong,
// and nothing panics.
func TestMeterBadInputGivesClearErrors(t *testing.T) {
	s := okServer(t)
	meters := func(n int, extra ...rm.Option) []rm.Option {
		o := []rm.Option{rm.WithRules(minuteRules...)}
		for i := range n {
			o = append(o, rm.WithMeter(rm.Meter{Name: fmt.Sprint("m", i), Rules: minuteRules}))
		}
		return append(o, extra...)
	}
	newErr := func(opts []rm.Option) func() error {
		return func() error {
			tr, err := rm.New(nil, opts...)
			if err == nil {
				tr.Close()
			}
			return err
		}
	}
	view := func(opts []rm.Option, ask func(*rm.Transport) error) func() error {
		return func() error {
			tr, err := rm.New(nil, opts...)
			if err != nil {
				return err
			}
			defer tr.Close()
			return ask(tr)
		}
	}
	cost := func(c int) func() error {
		return view([]rm.Option{rm.WithRules(minuteRules...), rm.WithPacing(), rm.WithMeter(rm.Meter{Name: "m", Rules: minuteRules,
			Cost: func(*http.Request) int { return c }})}, func(tr *rm.Transport) error { return rt(tr, http.MethodGet, s.URL) })
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		f    func() error
		want string
	}{
		{"9 meters", newErr(meters(9)), `WithMeter("m8"): more than 8 meters`},
		{"9 meters, one of InFlight only", newErr(meters(8, rm.WithMeter(rm.Meter{Name: "i", InFlight: 3}))), `WithMeter("i"): more than 8 meters`},
		{"a name taken by a meter with rules", newErr(meters(1, rm.WithMeter(rm.Meter{Name: "m0", InFlight: 2}))), `WithMeter("m0"): a meter named "m0" is already set`},
		{"a name taken by a meter of InFlight only", newErr([]rm.Option{rm.WithRules(minuteRules...), rm.WithMeter(rm.Meter{Name: "m", InFlight: 2}),
			rm.WithMeter(rm.Meter{Name: "m", Rules: minuteRules})}), `WithMeter("m"): a meter named "m" is already set`},
		{"the zero Transport's meter", func() error {
			var z rm.Transport
			_, err := z.Meter("x").AllocationUsed(ctx, "k")
			return err
		}, "Transport has no rules"},
		{"a nil Transport's meter", func() error {
			var z *rm.Transport
			_, err := z.Meter("x").WaitTime(ctx, "k", 1)
			return err
		}, "Transport has no rules"},
		{"the zero MeterView", func() error {
			var v rm.MeterView
			_, err := v.WaitSeconds(ctx, "k", 1)
			return err
		}, "Transport has no rules"},
		{"cost -1", cost(-1), `request cost -1 on meter "m"`},
		{"cost 2^40", cost(1 << 40), `request cost 1099511627776 on meter "m"`},
		{"a meter of InFlight only asked for its rules", view([]rm.Option{rm.WithRules(minuteRules...), rm.WithMeter(rm.Meter{Name: "i", InFlight: 3})},
			func(tr *rm.Transport) error { _, err := tr.Meter("i").AllocationUsed(ctx, "k"); return err }),
			`meter "i" keeps no rules, only a cap on requests in progress`},
		{"a burst of 0", view(meters(1), func(tr *rm.Transport) error { _, err := tr.Meter("m0").WaitTime(ctx, "k", 0); return err }),
			`ratemonitor: meter "m0", key "m0:k": burst must be at least 1`},
		{"a burst no rule takes", view(meters(1), func(tr *rm.Transport) error { _, err := tr.Meter("m0").WaitSeconds(ctx, "k", 1<<40); return err }),
			`ratemonitor: meter "m0", key "m0:k": burst exceeds limit`},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panic: %v", p)
				}
			}()
			if err := c.f(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want an error saying %q", err, c.want)
			}
		})
	}
}

package ratemonitor

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// pointsReader reads a made-up API's fields: X-Req-Limit and X-Req-Left, its requests a
// minute; X-Pts-Limit, X-Pts-Left and X-Pts-Cost, its points a minute and what the request
// cost on them (meter "points").
var pointsReader = cost.ReaderFunc(func(resp *http.Response, _ time.Time) cost.Report {
	n := func(name string) int {
		v, err := strconv.Atoi(resp.Header.Get(name))
		if err != nil {
			return headers.Unknown
		}
		return v
	}
	rep := cost.Report{Cost: cost.Unknown}
	if left := n("X-Req-Left"); left != headers.Unknown {
		rep.Signals = []headers.Signal{{Window: time.Minute, Remaining: left, Limit: n("X-Req-Limit"), Reset: headers.Unknown}}
	}
	pts := cost.Report{Cost: cost.Unknown}
	if c := n("X-Pts-Cost"); c != headers.Unknown {
		pts.Cost = c
	}
	if left := n("X-Pts-Left"); left != headers.Unknown {
		pts.Signals = []headers.Signal{{Window: time.Minute, Remaining: left, Limit: n("X-Pts-Limit"), Reset: headers.Unknown}}
	}
	rep.Meters = map[string]cost.Report{"points": pts}
	return rep
})

// pointsUpstream answers every request with pointsReader's fields: 10 requests and 100 points
// a minute, all left, and a cost of 7 points.
var pointsUpstream = roundTripFunc(func(req *http.Request) (*http.Response, error) {
	h := http.Header{}
	for k, v := range map[string]string{"X-Req-Limit": "10", "X-Req-Left": "10", "X-Pts-Limit": "100", "X-Pts-Left": "100", "X-Pts-Cost": "7"} {
		h.Set(k, v)
	}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: req}, nil
})

// sendOK sends a GET to api.test through tr and closes the answer.
func sendOK(t *testing.T, tr *Transport) {
	t.Helper()
	resp, err := send(tr, context.Background(), "http://api.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// pointsMeter charges 5 points a request before the send.
func pointsMeter(name string) Option {
	return WithMeter(Meter{Name: name, Cost: func(*http.Request) int { return 5 }})
}

// TestLearnedFromCostReport: a Transport without rules, given WithCostReport and a meter with
// a Cost and no rules, learns "requests" (10 a minute) and "points" (100 a minute) from the
// report of its first answer, which it does not charge; the second request is charged 5
// points and corrected to the 7 the report says. A second Transport over the store, given the
// same meter, paces on both without an answer of its own; a third, given no "points" meter,
// keeps only "requests".
func TestLearnedFromCostReport(t *testing.T) {
	clk := clock.NewManual(t0)
	mem := newMem(t, clk)
	newT := func(base http.RoundTripper, meter string) *Transport {
		tr, err := New(base, WithStore(mem), WithPacing(), pointsMeter(meter), WithCostReport(pointsReader))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	a := newT(pointsUpstream, "points")
	for range 2 {
		sendOK(t, a)
	}
	const want = "requests requests:api.test 10/1m0s used 1; points points:api.test 100/1m0s used 7"
	if got := meterFigures(t, a, "api.test"); got != want {
		t.Errorf("A: %s\nwant %s", got, want)
	}
	b := newT(plain{pointsUpstream}, "points")
	sendOK(t, b)
	if got, want := meterFigures(t, b, "api.test"), "requests requests:api.test 10/1m0s used 2; points points:api.test 100/1m0s used 12"; got != want {
		t.Errorf("B: %s\nwant %s", got, want)
	}
	c := newT(plain{pointsUpstream}, "other")
	sendOK(t, c)
	if got, want := meterFigures(t, c, "api.test"), "requests requests:api.test 10/1m0s used 3"; got != want {
		t.Errorf("C: %s\nwant %s", got, want)
	}
}

// TestLearnedFromCostReportRefused: New refuses what a Transport without rules cannot learn
// from a cost report, naming what to give.
func TestLearnedFromCostReportRefused(t *testing.T) {
	for _, c := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithCostReport(pointsReader)}, "WithCostReport without rules: give WithRules too, or meters with a Cost and no rules"},
		{[]Option{pointsMeter("points")}, `WithMeter("points"): no rules and no InFlight: give the meter's limits, or WithCostReport to learn them from its figures`},
		{[]Option{pointsMeter("requests"), WithCostReport(pointsReader)}, `WithMeter("requests") without rules: the name is the learned meter of the cost report's own figures`},
		{[]Option{pointsMeter("points"), WithCostReport(pointsReader), WithCost(func(*http.Request) int { return 2 })}, "WithCost without rules"},
		{[]Option{WithRules(strategy.Rule{Limit: 1, Window: time.Second}), pointsMeter("points"), WithCostReport(pointsReader)},
			`WithMeter("points"): no rules and no InFlight: give the meter's limits (only a Transport without WithRules learns a meter's limits)`},
		{[]Option{pointsMeter("points"), pointsMeter("points"), WithCostReport(pointsReader)}, `a meter named "points" is already set`},
		{[]Option{pointsMeter("x-ratelimit"), WithCostReport(pointsReader)}, `those names are the meters learned from X-RateLimit-* and the IETF fields`},
		{[]Option{pointsMeter("ietf:burst"), WithCostReport(pointsReader)}, `those names are the meters learned from X-RateLimit-* and the IETF fields`},
		{[]Option{pointsMeter("a"), pointsMeter("b"), pointsMeter("c"), pointsMeter("d"), pointsMeter("e"), pointsMeter("f"), pointsMeter("g"), pointsMeter("h"), WithCostReport(pointsReader)},
			`8 meters without rules: with the learned meter "requests" a key would keep more than 8`},
		{[]Option{WithMeter(Meter{Name: "pts", Rules: []strategy.Rule{{Limit: 5, Window: time.Second}}}), WithCostReport(pointsReader)},
			`WithMeter("pts") has limits (rules or InFlight) but the Transport has no rules: give WithRules too; or, to learn the meter's limits, give it no rules`},
	} {
		tr, err := New(nil, c.opts...)
		if err == nil {
			tr.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v\nwant an error containing %q", err, c.want)
		}
	}
}

// TestLearnedFromCostReportRefusal: a 429 with Retry-After 30 and remaining counts that are not
// 0 pauses the key's own meter ("requests") for 30 s, not a meter on an app key, which other
// keys share.
func TestLearnedFromCostReportRefusal(t *testing.T) {
	clk := clock.NewManual(t0)
	refuse := false
	up := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := pointsUpstream(req)
		if refuse {
			resp.StatusCode = http.StatusTooManyRequests
			resp.Header.Set("Retry-After", "30")
		}
		return resp, err
	})
	tr, err := New(up, WithClock(clk), WithPacing(), WithCostReport(pointsReader),
		WithMeter(Meter{Name: "points", AppKey: "app-points", Cost: func(*http.Request) int { return 5 }}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sendOK(t, tr)
	refuse = true
	sendOK(t, tr)
	st, err := tr.Status(context.Background(), "api.test")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"requests": t0.Add(30 * time.Second), "points": {}}
	for _, m := range st.Meters {
		if !m.PausedUntil.Equal(want[m.Meter]) {
			t.Errorf("meter %q (key %q) paused until %v, want %v", m.Meter, m.Key, m.PausedUntil, want[m.Meter])
		}
		delete(want, m.Meter)
	}
	if len(want) > 0 {
		t.Errorf("meters not learned: %v", want)
	}
}

// TestLearnedFromCostReportNoMeterKey: a learned meter whose Key gives "" for a key is learned
// from the first answer, which is kept on no key; the key's next request is refused, naming
// the meter, and nothing is sent.
func TestLearnedFromCostReportNoMeterKey(t *testing.T) {
	var sent atomic.Int64
	up := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent.Add(1)
		return pointsUpstream(req)
	})
	tr, err := New(up, WithPacing(), WithCostReport(pointsReader),
		WithMeter(Meter{Name: "points", Key: func(string) string { return "" }, Cost: func(*http.Request) int { return 5 }}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sendOK(t, tr)
	_, err = send(tr, context.Background(), "http://api.test/")
	if err == nil || !strings.Contains(err.Error(), `meter "points": not sent: its Key func returned ""`) {
		t.Errorf("second request: %v, want the meter's key error", err)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("%d requests sent, want 1", n)
	}
}

// TestLearnedFromCostReportLimitBelowCost: a report that says "points" allows 4 a minute does
// not stop requests that cost 5 there: they go uncharged on it, and the next answers (100)
// replace the limit.
func TestLearnedFromCostReportLimitBelowCost(t *testing.T) {
	var sent atomic.Int64
	up := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := pointsUpstream(req)
		if sent.Add(1) == 1 {
			resp.Header.Set("X-Pts-Limit", "4")
			resp.Header.Set("X-Pts-Left", "4")
		}
		return resp, err
	})
	tr, err := New(up, WithPacing(), WithCostReport(pointsReader), pointsMeter("points"))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for range 3 {
		sendOK(t, tr)
	}
	const want = "requests requests:api.test 10/1m0s used 2; points points:api.test 100/1m0s used 7"
	if got := meterFigures(t, tr, "api.test"); got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
}

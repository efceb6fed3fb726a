package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestFixedMeterUsedUpWaitsForTheProbe: a meter "day" of 100 a day that SyncConfig.Fixed
// names with a probe every 2 minutes. An answer whose cost report says the meter is used up
// (remaining 0) with no reset holds the key for the probe interval, as it does for the
// request's own rules: the next request does not go out at once (docs/sync.md, "at most one
// refusal an interval").
func TestFixedMeterUsedUpWaitsForTheProbe(t *testing.T) {
	var sent atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	usedUp := cost.ReaderFunc(func(*http.Response, time.Time) cost.Report {
		return cost.Report{Cost: cost.Unknown, Meters: map[string]cost.Report{"day": {Cost: cost.Unknown,
			Signals: []headers.Signal{{Window: 24 * time.Hour, Remaining: 0, Limit: 100, Reset: headers.Unknown}}}}}
	})
	tr, err := New(base,
		WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		WithMeter(Meter{Name: "day", Rules: []strategy.Rule{{Limit: 100, Window: 24 * time.Hour, Granularity: time.Minute}}}),
		WithCostReport(usedUp),
		WithSync(SyncConfig{Fixed: map[time.Duration]time.Duration{24 * time.Hour: 2 * time.Minute}}),
		WithPacing())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	send := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	if err := send(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = send(ctx)
	if err == nil || sent.Load() != 1 {
		t.Fatalf("after a used-up fixed meter with no reset: the next request went out at once (sent %d, err %v); want it held for the 2-minute probe interval", sent.Load(), err)
	}
}

package ratemonitor_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	rm "github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestStackedOnlyMetersLeftDeadlineNamesTheMeter: outer and inner over one store keep the
// same key rules; only the inner keeps meter "points" (1 a minute). The second request, with a
// 100 ms deadline, is refused by the inner Transport for the meter: its DeadlineError should say
// Key "k", Meter "points". It says Key "points:k", Meter "" (the key's own rules).
func TestStackedOnlyMetersLeftDeadlineNamesTheMeter(t *testing.T) {
	st, _ := cache.NewMemory(cache.MemoryConfig{})
	defer st.Close()
	base := rtFunc(func(r *http.Request) (*http.Response, error) { return okResp(r), nil })
	key := strategy.Rule{Limit: 100, Window: time.Minute}
	kf := rm.WithKeyFunc(func(*http.Request) string { return "k" })
	inner, err := rm.New(base, rm.WithStore(st), rm.WithRules(key), rm.WithPacing(), kf,
		rm.WithMeter(rm.Meter{Name: "points", Rules: []strategy.Rule{{Limit: 1, Window: time.Minute}}}))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := rm.New(inner, rm.WithStore(st), rm.WithRules(key), rm.WithPacing(), kf)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil)
		resp, err := outer.RoundTrip(req)
		cancel()
		if err == nil {
			resp.Body.Close()
		}
		last = err
	}
	var de *rm.DeadlineError
	if !errors.As(last, &de) {
		t.Fatalf("second request: %v, want a *DeadlineError", last)
	}
	if de.Key != "k" || de.Meter != "points" {
		t.Errorf("DeadlineError{Key: %q, Meter: %q}, want Key \"k\", Meter \"points\": %v", de.Key, de.Meter, de)
	}
}

package ratemonitor_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	rm "github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// plainStore is a third-party store: only the Store methods, no Describer.
type plainStore struct{ cache.Store }

// TestStackedMetersOverAStoreWithoutTraitsCountOnce: outer and inner over one plainStore, both with the
// same meter and key rules (and the inner with one more meter): each counter counts a request
// once; paced and monitoring.
func TestStackedMetersOverAStoreWithoutTraitsCountOnce(t *testing.T) {
	for _, paced := range []bool{false, true} {
		mem, _ := cache.NewMemory(cache.MemoryConfig{})
		st := &plainStore{mem}
		base := rtFunc(func(r *http.Request) (*http.Response, error) { return okResp(r), nil })
		key := strategy.Rule{Limit: 100, Window: time.Minute}
		m := rm.Meter{Name: "pts", Rules: []strategy.Rule{{Limit: 50, Window: time.Minute}}}
		extra := func() []rm.Option {
			if paced {
				return []rm.Option{rm.WithPacing()}
			}
			return nil
		}
		kf := rm.WithKeyFunc(func(*http.Request) string { return "k" })
		inner, err := rm.New(base, append(extra(), rm.WithStore(st), rm.WithRules(key), kf, rm.WithMeter(m),
			rm.WithAppRules("app", strategy.Rule{Limit: 50, Window: time.Minute}))...)
		if err != nil {
			t.Fatal(err)
		}
		outer, err := rm.New(inner, append(extra(), rm.WithStore(st), rm.WithRules(key), kf, rm.WithMeter(m))...)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
			resp, err := outer.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		s, _ := inner.Status(context.Background(), "k")
		if s.Rules[0].Used != 3 || s.Meters[0].Rules[0].Used != 3 || s.Meters[1].Rules[0].Used != 3 {
			t.Errorf("paced %v: key %d pts %d app %d, want 3 each", paced, s.Rules[0].Used, s.Meters[0].Rules[0].Used, s.Meters[1].Rules[0].Used)
		}
		mem.Close()
	}
}

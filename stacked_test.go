package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// stackStores returns makers of the stores the stacking tests run on in this module: a memory
// store (each call a new, empty one). The same tests over the Redis store are in
// the Redis module's transporttest package.
func stackStores(t *testing.T) map[string]func() cache.Store {
	return map[string]func() cache.Store{
		"memory": func() cache.Store {
			mem, err := cache.NewMemory(cache.MemoryConfig{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mem.Close() })
			return mem
		},
	}
}

// day10 is Xero's day rule in 10 s buckets, which the Redis store accepts.
var day10 = strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}

// retryTwice sends every request twice through next, as a retrying RoundTripper placed between
// two Transports does: each attempt reaches the base, so each is counted.
type retryTwice struct{ next http.RoundTripper }

func (r retryTwice) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return r.next.RoundTrip(req)
}

// TestStackedTransportsCountOnce is issue 13's defect 1: an outer Transport wrapping an inner
// one on the same key and store counts each attempt once per counter, however the rules of the
// two layers overlap, in monitoring and in pacing mode.
func TestStackedTransportsCountOnce(t *testing.T) {
	hour := strategy.Rule{Limit: 1000, Window: time.Hour}
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			up, hits := upstreamtest.Counting(t, nil)
			key := strings.TrimPrefix(up.URL, "http://")

			// Same rules in both layers: one request is used = 1 in both rules.
			inner := newTransport(t, nil, WithRules(minute, day10), WithStore(st))
			outer := newTransport(t, inner, WithRules(minute, day10), WithStore(st))
			if _, err := upstreamtest.Get(t, &http.Client{Transport: outer}, up.URL); err != nil {
				t.Fatal(err)
			}
			if u := usedOf(t, outer, key); !slices.Equal(u, []int{1, 1}) {
				t.Errorf("same rules: used %v, want [1 1]", u)
			}

			// Overlapping rules: the minute counter is shared, the day and hour ones are not.
			inner2 := newTransport(t, nil, WithRules(minute, hour), WithStore(st))
			outer2 := newTransport(t, inner2, WithRules(minute, day10), WithStore(st))
			if _, err := upstreamtest.Get(t, &http.Client{Transport: outer2}, up.URL); err != nil {
				t.Fatal(err)
			}
			if u := usedOf(t, inner2, key); !slices.Equal(u, []int{2, 1}) {
				t.Errorf("overlapping rules: inner used %v, want [2 1]", u)
			}
			if u := usedOf(t, outer2, key); !slices.Equal(u, []int{2, 2}) {
				t.Errorf("overlapping rules: outer used %v, want [2 2]", u)
			}

			// A retry between the layers is a second attempt at the base: counted in every
			// counter of the inner Transport, the minute one included.
			inner3 := newTransport(t, nil, WithRules(minute, hour), WithStore(st))
			outer3 := newTransport(t, retryTwice{inner3}, WithRules(minute), WithStore(st))
			if _, err := upstreamtest.Get(t, &http.Client{Transport: outer3}, up.URL); err != nil {
				t.Fatal(err)
			}
			if u := usedOf(t, inner3, key); !slices.Equal(u, []int{4, 3}) {
				t.Errorf("retry between layers: used %v, want [4 3]", u)
			}
			if hits.Load() != 4 {
				t.Errorf("upstream got %d requests, want 4", hits.Load())
			}
		})
	}
}

// TestStackedPacedTransports: two paced layers with a limit of 2 per minute let exactly 2
// requests through and refuse the third at once (counted twice, the second would be refused).
func TestStackedPacedTransports(t *testing.T) {
	two := strategy.Rule{Limit: 2, Window: time.Minute}
	hour := strategy.Rule{Limit: 2, Window: time.Hour}
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			up, hits := upstreamtest.Counting(t, nil)
			key := strings.TrimPrefix(up.URL, "http://")
			inner := newTransport(t, nil, WithRules(two, hour), WithStore(st), WithPacing())
			outer := newTransport(t, inner, WithRules(two), WithStore(st), WithPacing())
			client := &http.Client{Transport: outer}
			for i := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
				resp, err := client.Do(req)
				cancel()
				if i < 2 && err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if i < 2 {
					resp.Body.Close()
				}
				if i == 2 && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("request 3: %v, want a deadline error", err)
				}
			}
			if hits.Load() != 2 {
				t.Errorf("upstream got %d, want 2", hits.Load())
			}
			if u := usedOf(t, inner, key); !slices.Equal(u, []int{2, 2}) {
				t.Errorf("used %v, want [2 2]", u)
			}
		})
	}
}

// TestSameWindowDifferentShapeRefused is issue 13's defect 2: rules of the same limit and
// window whose granularity or margin differ would be counted apart on a shared store; New
// refuses the second Transport, and the middleware's New too, saying why.
func TestSameWindowDifferentShapeRefused(t *testing.T) {
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			for _, pair := range [][2]strategy.Rule{
				{{Limit: 20, Window: time.Second, Granularity: 10 * time.Millisecond}, {Limit: 20, Window: time.Second, Granularity: 50 * time.Millisecond}},
				{{Limit: 20, Window: time.Second, Margin: 50 * time.Millisecond, Granularity: 50 * time.Millisecond}, {Limit: 20, Window: time.Second, Margin: 100 * time.Millisecond, Granularity: 50 * time.Millisecond}},
				{{Limit: 20, Window: 2 * time.Second}, {Limit: 30, Window: 2 * time.Second, Margin: time.Second}},
			} {
				st := mk()
				newTransport(t, nil, WithRules(pair[0]), WithStore(st))
				_, err := New(nil, WithRules(pair[1]), WithStore(st))
				if !errors.Is(err, cache.ErrCounterConflict) || !strings.Contains(err.Error(), pair[0].String()) {
					t.Errorf("%v then %v: %v, want ErrCounterConflict naming the first rule", pair[0], pair[1], err)
				}
				s1, err := rollingwindow.New(pair[1])
				if err != nil {
					t.Fatal(err)
				}
				if _, err := middleware.New(st, s1); !errors.Is(err, cache.ErrCounterConflict) {
					t.Errorf("middleware: %v then %v: %v, want ErrCounterConflict", pair[0], pair[1], err)
				}
				// The same shape, or another window, is fine.
				newTransport(t, nil, WithRules(pair[0]), WithStore(st))
				newTransport(t, nil, WithRules(strategy.Rule{Limit: 20, Window: 3 * time.Second, Margin: 2 * time.Second}), WithStore(st))
			}
		})
	}
}

// TestSameWindowSharesOneCount: two Transports with the same window and shape on one store and
// key together admit no more than the limit.
func TestSameWindowSharesOneCount(t *testing.T) {
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			rule := strategy.Rule{Limit: 5, Window: time.Minute, Headroom: 0}
			strict := strategy.Rule{Limit: 5, Window: time.Minute, Headroom: 2}
			a := newTransport(t, nil, WithRules(rule), WithStore(st), WithPacing())
			b := newTransport(t, nil, WithRules(strict), WithStore(st), WithPacing())
			granted := 0
			for _, tr := range []*Transport{a, b, a, b, a, b, a, b} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				r, err := tr.Reserve(ctx, "k", 1)
				cancel()
				if err == nil {
					granted++
					_ = r
				}
			}
			if granted != 5 {
				t.Errorf("granted %d, want 5 (the looser limit, on one shared count)", granted)
			}
		})
	}
}

// TestAppRulesDoNotConflictWithKeyRules: the app key's rules live on one key of their own, so a
// different margin there splits no count (the README's Xero configuration, on a given store);
// two Transports' app rules on the same app key are still checked.
func TestAppRulesDoNotConflictWithKeyRules(t *testing.T) {
	for name, mk := range stackStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			tenant := strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}
			app := strategy.Rule{Limit: 10_000, Window: time.Minute}
			for range 2 {
				newTransport(t, nil, WithRules(tenant), WithAppRules("xero-app", app), WithStore(st))
			}
			_, err := New(nil, WithRules(tenant), WithAppRules("xero-app", strategy.Rule{Limit: 10_000, Window: time.Minute, Margin: 2 * time.Second}), WithStore(st))
			if !errors.Is(err, cache.ErrCounterConflict) || !strings.HasPrefix(err.Error(), "ratemonitor: WithAppRules: ") {
				t.Errorf("app rules with another margin on the same app key: %v, want an app-rules ErrCounterConflict", err)
			}
			// A failed New claims nothing: the other app key's margin is free to differ.
			newTransport(t, nil, WithRules(tenant), WithAppRules("other-app", strategy.Rule{Limit: 100, Window: time.Minute, Margin: 2 * time.Second}), WithStore(st))
		})
	}
}

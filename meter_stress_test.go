package ratemonitor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rm "github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func okResp(r *http.Request) *http.Response {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: r, Header: http.Header{}}
}

type ledger struct {
	mu                sync.Mutex
	key, per, content map[string]int
	app               int
	sent              atomic.Int64
}

func newLedger() *ledger {
	return &ledger{key: map[string]int{}, per: map[string]int{}, content: map[string]int{}}
}

func contentCost(r *http.Request) int {
	if r.Method == http.MethodGet {
		return 0
	}
	return 2
}

// stressMeters is the option set of the stress tests: key 12/min, app 30/min, per-key 9/min,
// content (POST 2, GET 0) 8/min per key.
func stressMeters() []rm.Option {
	return []rm.Option{
		rm.WithRules(strategy.Rule{Limit: 12, Window: time.Minute}),
		rm.WithKeyFunc(rm.KeyByHeader("K", nil)),
		rm.WithMeter(rm.Meter{Name: "app", AppKey: "the-app", Rules: []strategy.Rule{{Limit: 30, Window: time.Minute}}}),
		rm.WithMeter(rm.Meter{Name: "per", Rules: []strategy.Rule{{Limit: 9, Window: time.Minute}}}),
		rm.WithMeter(rm.Meter{Name: "content", Key: func(k string) string { return "c:" + k }, Rules: []strategy.Rule{{Limit: 8, Window: time.Minute}}, Cost: contentCost}),
	}
}

// drive runs workers against tr, with deadlines, cancellations, priorities, Reserve + spend +
// Cancel, and books in l what each success must have charged.
func drive(t *testing.T, tr *rm.Transport, l *ledger, workers, ops int, reserve bool) {
	keys := []string{"k0", "k1", "k2", "k3"}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < ops; i++ {
				k := keys[rnd.IntN(len(keys))]
				ctx := rm.WithPriority(context.Background(), rm.Priority(rnd.IntN(3)-1))
				var cancel context.CancelFunc
				if rnd.IntN(2) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rnd.IntN(50))*time.Millisecond)
				} else {
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(time.Duration(rnd.IntN(50))*time.Millisecond, cancel)
				}
				method := http.MethodGet
				if rnd.IntN(2) == 0 {
					method = http.MethodPost
				}
				mk := func(ctx context.Context) *http.Request {
					req, _ := http.NewRequestWithContext(ctx, method, "http://x/", nil)
					req.Header.Set("K", k)
					return req
				}
				if reserve && rnd.IntN(4) == 0 { // Reserve n, spend s, Cancel
					n := 1 + rnd.IntN(2)
					r, err := tr.Reserve(ctx, k, n)
					if err != nil {
						cancel()
						continue
					}
					s := rnd.IntN(n + 1)
					spent := 0
					for j := 0; j < s; j++ {
						resp, err := tr.RoundTrip(mk(r.Context(context.Background())))
						if err != nil {
							t.Errorf("spending a slot: %v", err)
							continue
						}
						resp.Body.Close()
						spent++
					}
					if err := r.Cancel(context.Background()); err != nil {
						t.Errorf("Cancel: %v", err)
					}
					l.mu.Lock()
					l.key[k] += spent
					l.per[k] += spent
					l.content[k] += spent
					l.app += spent
					l.mu.Unlock()
					cancel()
					continue
				}
				resp, err := tr.RoundTrip(mk(ctx))
				cancel()
				if err != nil {
					var de *rm.DeadlineError
					if !errors.As(err, &de) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("unexpected error: %v", err)
					}
					continue
				}
				resp.Body.Close()
				l.mu.Lock()
				l.key[k]++
				l.per[k]++
				l.content[k] += contentCost(mk(ctx))
				l.app++
				l.mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
}

// check compares the store with the ledger, and the limits.
func check(t *testing.T, tr *rm.Transport, l *ledger, exact bool) {
	ctx := context.Background()
	for _, k := range []string{"k0", "k1", "k2", "k3"} {
		st, err := tr.Status(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(st.Rules[0].Used, st.Meters[1].Rules[0].Used, st.Meters[2].Rules[0].Used)
		want := fmt.Sprint(l.key[k], l.per[k], l.content[k])
		if l.key[k] > 12 || l.per[k] > 9 || l.content[k] > 8 || l.app > 30 {
			t.Errorf("key %s: sent over a limit: %s app %d", k, want, l.app)
		}
		under := st.Rules[0].Used < l.key[k] || st.Meters[1].Rules[0].Used < l.per[k] || st.Meters[2].Rules[0].Used < l.content[k] || st.Meters[0].Rules[0].Used < l.app
		if under || (exact && got != want) {
			t.Errorf("key %s: store holds key/per/content %s, the successes charged %s", k, got, want)
		}
		if st.Rules[0].Used > 12 || st.Meters[1].Rules[0].Used > 9 || st.Meters[2].Rules[0].Used > 8 {
			t.Errorf("key %s over a limit: %s", k, got)
		}
		if k == "k0" && st.Meters[0].Rules[0].Used != l.app {
			t.Errorf("app: store holds %d, the successes charged %d", st.Meters[0].Rules[0].Used, l.app)
		}
		if st.Meters[0].Rules[0].Used > 30 {
			t.Errorf("app over its limit: %d", st.Meters[0].Rules[0].Used)
		}
	}
	t.Logf("sent: %v app %d", l.key, l.app)
}

// TestThreeMetersUnderStressNeverOvershoot: 24 workers, 4 keys, 3 meters (app, derived, Cost 0 for GETs),
// deadlines and cancellations, priorities, Reserve + Cancel: every charge in the store belongs
// to a request sent (or a slot kept), and no limit is passed.
func TestThreeMetersUnderStressNeverOvershoot(t *testing.T) {
	for round := 0; round < 3; round++ {
		tr, err := rm.New(rtFunc(func(r *http.Request) (*http.Response, error) { return okResp(r), nil }), append(stressMeters(), rm.WithPacing())...)
		if err != nil {
			t.Fatal(err)
		}
		l := newLedger()
		drive(t, tr, l, 24, 12, true)
		check(t, tr, l, true)
		tr.Close()
	}
}

// TestStackedMetersUnderStressNeverUnderCount: the same, through an outer Transport (key rules 12/min and the meter
// "per", same store) wrapping the inner one with all three meters: each counter charged once.
func TestStackedMetersUnderStressNeverUnderCount(t *testing.T) {
	st, _ := cache.NewMemory(cache.MemoryConfig{})
	defer st.Close()
	inner, err := rm.New(rtFunc(func(r *http.Request) (*http.Response, error) { return okResp(r), nil }), append(stressMeters(), rm.WithPacing(), rm.WithStore(st))...)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := rm.New(inner, rm.WithStore(st), rm.WithPacing(), rm.WithRules(strategy.Rule{Limit: 12, Window: time.Minute}),
		rm.WithKeyFunc(rm.KeyByHeader("K", nil)),
		rm.WithMeter(rm.Meter{Name: "per", Rules: []strategy.Rule{{Limit: 9, Window: time.Minute}}}))
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	drive(t, outer, l, 24, 12, false)
	check(t, inner, l, false)
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// keyedRecorder is a recorder that also keeps each key's grants (less the ones given back) and
// the strategy they were asked under, so that a run charging several keys per request can be
// judged key by key.
type keyedRecorder struct {
	*recorder
	mu    sync.Mutex
	byKey map[string]*keyGrants
}

type keyGrants struct {
	s      *engine.Strategy
	grants []Grant
}

func (k *keyedRecorder) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	res, err := k.recorder.Reserve(ctx, s, key, n)
	if err == nil && res.Allowed {
		k.mu.Lock()
		kg := k.byKey[key]
		if kg == nil {
			kg = &keyGrants{s: s}
			k.byKey[key] = kg
		}
		kg.grants = append(kg.grants, Grant{At: res.At, N: n})
		k.mu.Unlock()
	}
	return res, err
}

func (k *keyedRecorder) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	err := k.recorder.Release(ctx, s, key, at, n)
	if err == nil {
		k.mu.Lock()
		if kg := k.byKey[key]; kg != nil {
			for i := range kg.grants {
				if n > 0 && kg.grants[i].N > 0 && kg.grants[i].At.Equal(at) {
					take := min(n, kg.grants[i].N)
					kg.grants[i].N -= take
					n -= take
				}
			}
		}
		k.mu.Unlock()
	}
	return err
}

// held returns the slots key holds, summed, and its grants.
func (k *keyedRecorder) held(key string) (int, *keyGrants) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kg := k.byKey[key]
	if kg == nil {
		return 0, &keyGrants{}
	}
	sum := 0
	for _, g := range kg.grants {
		sum += g.N
	}
	return sum, kg
}

// meterBase stands for the upstream: it notes what each request sent cost on the meter.
type meterBase struct {
	mu     sync.Mutex
	sent   map[string][2]int // token → requests, points
	writes int               // requests with X-Write, of every token
}

func (b *meterBase) RoundTrip(req *http.Request) (*http.Response, error) {
	cost, _ := strconv.Atoi(req.Header.Get("X-Cost"))
	tok := req.Header.Get("X-Token")
	b.mu.Lock()
	s := b.sent[tok]
	b.sent[tok] = [2]int{s[0] + 1, s[1] + cost}
	if req.Header.Get("X-Write") != "" {
		b.writes++
	}
	b.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// meters paces 16 goroutines' requests on 3 tokens through one Transport charging each request
// on two or three meters (10 ms buckets): the token's rules (10 in 200 ms and 24 in 800 ms, 1 a
// request), a meter of points under "points:" + the token (15 in 200 ms and 40 in 800 ms, 1 to
// 3 a request) and, for every other pair of requests (a write), a meter of writes under one key
// for every token (6 in 200 ms and 16 in 800 ms, 1 a write), on the store's own clock (as
// transport64: a Redis server's keys expire on its own time). Every grant is judged at the
// store's instant, per key, against its rules; each token's key holds exactly the requests
// sent, its points meter exactly their points, and the writes meter exactly the writes sent: all
// or nothing, nothing counted twice. A store error refuses the request (SendNothing), and it is
// sent again.
func meters(t *testing.T, tg Target) {
	rep := newReport(t, tg)
	defer rep.done()
	rec := &keyedRecorder{recorder: &recorder{Store: tg.Open(t, nil)}, byKey: map[string]*keyGrants{}}
	b := &meterBase{sent: map[string][2]int{}}
	prefix := newKey("meters")
	tr, err := ratemonitor.New(b, ratemonitor.WithPacing(), ratemonitor.WithStore(rec),

		ratemonitor.WithStoreErrorPolicy(ratemonitor.SendNothing),
		ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: 200 * time.Millisecond, Granularity: 10 * time.Millisecond}, strategy.Rule{Limit: 24, Window: 800 * time.Millisecond, Granularity: 10 * time.Millisecond}),
		ratemonitor.WithKeyFunc(func(r *http.Request) string { return prefix + r.Header.Get("X-Token") }),
		ratemonitor.WithMeter(ratemonitor.Meter{Name: "points",
			Rules: []strategy.Rule{{Limit: 15, Window: 200 * time.Millisecond, Granularity: 10 * time.Millisecond}, {Limit: 40, Window: 800 * time.Millisecond, Granularity: 10 * time.Millisecond}},
			Cost:  func(r *http.Request) int { n, _ := strconv.Atoi(r.Header.Get("X-Cost")); return n }}),
		ratemonitor.WithMeter(ratemonitor.Meter{Name: "writes", AppKey: prefix + "writes",
			Rules: []strategy.Rule{{Limit: 6, Window: 200 * time.Millisecond, Granularity: 10 * time.Millisecond}, {Limit: 16, Window: 800 * time.Millisecond, Granularity: 10 * time.Millisecond}},
			Cost: func(r *http.Request) int {
				if r.Header.Get("X-Write") != "" {
					return 1
				}
				return 0
			}}),
		ratemonitor.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	requests, start := max(60, rounds(tg, 240, 1)), time.Now() // at least 20 a token, so that the limits bind
	var next, storeErrs atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < requests; i = int(next.Add(1)) - 1 {
				req, _ := http.NewRequestWithContext(ctx(t), http.MethodGet, "http://upstream.test/", nil)
				req.Header.Set("X-Token", strconv.Itoa(i%3))
				req.Header.Set("X-Cost", strconv.Itoa(1+i/3%3))
				if i/2%2 == 0 {
					req.Header.Set("X-Write", "1")
				}
				for {
					resp, err := tr.RoundTrip(req)
					if se := (*ratemonitor.StoreError)(nil); errors.As(err, &se) {
						storeErrs.Add(1)
						continue
					}
					if err != nil {
						rep.fail("request %d: %v", i, err)
					} else {
						resp.Body.Close()
					}
					break
				}
			}
		})
	}
	wg.Wait()
	for tok := range 3 {
		key := prefix + strconv.Itoa(tok)
		sent := b.sent[strconv.Itoa(tok)]
		n, kg := rec.held(key)
		points, mg := rec.held("points:" + key)
		if n != sent[0] || points != sent[1] {
			rep.fail("token %d: %d requests sent costing %d points; the store holds %d on the key and %d on the meter, want the same", tok, sent[0], sent[1], n, points)
		}
		if kg.s == nil || mg.s == nil {
			rep.fail("token %d: no grants on its key or its meter", tok)
			continue
		}
		rep.violations(fmt.Sprintf("token %d's grants", tok), kg.s, kg.grants, 0)
		rep.violations(fmt.Sprintf("token %d's points", tok), mg.s, mg.grants, 0)
	}
	writes, wk := rec.held(prefix + "writes")
	if writes != b.writes || wk.s == nil {
		rep.fail("%d writes sent; the store holds %d on the writes meter, want the same", b.writes, writes)
	} else {
		rep.violations("the writes", wk.s, wk.grants, 0)
	}
	t.Logf("%s: %d requests on 3 tokens, each charged on two or three meters, in %v; %d store errors, sent again", tg.Name, requests, time.Since(start).Round(time.Millisecond), storeErrs.Load())
}

package ratemonitor

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

type noop struct{ resp *http.Response }

func (n noop) RoundTrip(*http.Request) (*http.Response, error) { return n.resp, nil }

// noopStore is a store that keeps nothing and grants everything, allocating nothing: under it a
// Transport's figures are its own work, the store's share taken out (BenchmarkTransport's
// store=noop rows, TestRoundTripAllocatesNothingOnTheCommonPath). In process, like the memory
// store, so that a paced Transport over it has no degraded mode either; a Syncer, for WithSync. Use
// a pointer, one per Transport: each is a store of its own, with its own cache.Sharing.
type noopStore struct{ sharing cache.Sharing }

func (*noopStore) Record(context.Context, *engine.Strategy, string, int) error { return nil }
func (*noopStore) Reserve(context.Context, *engine.Strategy, string, int) (engine.Result, error) {
	return engine.Result{Allowed: true}, nil
}
func (*noopStore) Release(context.Context, *engine.Strategy, string, time.Time, int) error {
	return nil
}
func (*noopStore) Peek(context.Context, *engine.Strategy, string, int) (strategy.Snapshot, error) {
	return strategy.Snapshot{}, nil
}
func (*noopStore) Sync(context.Context, *engine.Strategy, string, engine.Update) error { return nil }
func (*noopStore) PutLimits(context.Context, string, []byte, time.Duration) error      { return nil }
func (*noopStore) Limits(context.Context, string) ([]byte, error)                      { return nil, nil }
func (*noopStore) Close() error                                                        { return nil }
func (n *noopStore) Describe() cache.Traits {
	return cache.Traits{InProcess: true, Sharing: &n.sharing}
}

// BenchmarkTransport measures what the Transport adds to a request over a base RoundTripper
// that does nothing (issue 17: under 150 ns is the goal), monitoring and paced, on one hot key
// and over 10 000 keys (tenants by the Xero-Tenant-Id header), from b.RunParallel goroutines,
// with the default memory store. The rules are the README's Xero rules (a minute with a 1 s
// margin, a day at the default granularity, 24 min) with limits far above the rate, so that pacing
// never waits and no key reaches a limit: this is the cost of counting and reserving, not of
// waiting. The overhead is each row minus base-only. The store=noop rows run the same over a
// store that keeps nothing (noopStore): the Transport's own part, without the store's.
//
//	go test -run '^$' -bench Transport -benchmem -benchtime 300ms -count 3 .
func BenchmarkTransport(b *testing.B) {
	base := noop{resp: &http.Response{StatusCode: 200}}
	rules := []strategy.Rule{
		{Limit: 1 << 30, Window: time.Minute, Margin: time.Second},
		{Limit: 1 << 30, Window: 24 * time.Hour},
	}
	requests := func(keys int) []*http.Request {
		reqs := make([]*http.Request, keys)
		for i := range reqs {
			reqs[i], _ = http.NewRequest(http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
			reqs[i].Header.Set("Xero-Tenant-Id", "tenant-"+strconv.Itoa(i))
		}
		return reqs
	}
	run := func(b *testing.B, rt http.RoundTripper, reqs []*http.Request) {
		for _, r := range reqs {
			if _, err := rt.RoundTrip(r); err != nil {
				b.Fatal(err)
			}
		}
		var start atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(start.Add(1) * 7919) // goroutines start apart in the key space
			for pb.Next() {
				if _, err := rt.RoundTrip(reqs[i%len(reqs)]); err != nil {
					b.Error(err)
					return
				}
				i += 7
			}
		})
	}
	b.Run("base-only", func(b *testing.B) { run(b, base, requests(1)) })
	// The memory store's rows, then the same with a store that does nothing: the Transport's own
	// part.
	// meters=xero adds Xero's second meter, the app's minute (WithAppRules); its third, 5 in
	// flight per tenant, is BenchmarkInFlight's.
	for _, noop := range []bool{false, true} {
		for _, meters := range []string{"", "xero"} {
			for _, mode := range []string{"monitor", "paced"} {
				for _, keys := range []int{1, 10_000} {
					name := mode + "/keys=" + strconv.Itoa(keys)
					opts := []Option{WithRules(rules...), WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil))}
					if meters != "" {
						name += "/meters=" + meters
						opts = append(opts, WithAppRules("xero-app", strategy.Rule{Limit: 1 << 30, Window: time.Minute, Margin: time.Second}))
					}
					if noop {
						name += "/store=noop"
						opts = append(opts, WithStore(&noopStore{}))
					}
					if mode == "paced" {
						opts = append(opts, WithPacing())
					}
					b.Run(name, func(b *testing.B) {
						tr, err := New(base, opts...)
						if err != nil {
							b.Fatal(err)
						}
						defer tr.Close()
						run(b, tr, requests(keys))
					})
				}
			}
		}
	}
}

// BenchmarkPacing measures a paced RoundTrip (an atomic reserve in the memory store) on one hot
// key with 2, 8 and 64 goroutines, and spread over 10 000 keys. The limits are high enough that
// nothing waits: this is the cost of pacing itself.
func BenchmarkPacing(b *testing.B) {
	base := noop{resp: &http.Response{StatusCode: 200}}
	rules := []strategy.Rule{{Limit: 1 << 30, Window: time.Minute}, {Limit: 1 << 30, Window: 24 * time.Hour, Granularity: time.Minute}}
	run := func(b *testing.B, goroutines, keys int) {
		tr, err := New(base, WithRules(rules...), WithPacing())
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		reqs := make([]*http.Request, keys)
		for i := range reqs {
			reqs[i], _ = http.NewRequest(http.MethodGet, "https://h"+strconv.Itoa(i)+".example/", nil)
			tr.RoundTrip(reqs[i])
		}
		b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := tr.RoundTrip(reqs[i%keys]); err != nil {
					b.Error(err)
					return
				}
				i += 7
			}
		})
	}
	for _, g := range []int{2, 8, 64} {
		b.Run("hot-key/goroutines="+strconv.Itoa(g), func(b *testing.B) { run(b, g, 1) })
	}
	b.Run("keys=10000/goroutines=8", func(b *testing.B) { run(b, 8, 10_000) })
}

// BenchmarkSync measures a monitored RoundTrip with WithSync reading Xero's headers off every
// response (three counts, one of them lower than ours so nothing is raised) and an app key:
// what learning from the upstream adds to each request.
func BenchmarkSync(b *testing.B) {
	h := http.Header{}
	h.Set("X-MinLimit-Remaining", "59")
	h.Set("X-DayLimit-Remaining", "4999")
	h.Set("X-AppMinLimit-Remaining", "9999")
	base := noop{resp: &http.Response{StatusCode: 200, Header: h}}
	req, _ := http.NewRequest(http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
	req.Header.Set("Xero-Tenant-Id", "tenant-1")
	rules := []strategy.Rule{{Limit: 1 << 30, Window: time.Minute}, {Limit: 1 << 30, Window: 24 * time.Hour, Granularity: time.Minute}}
	bare := noop{resp: &http.Response{StatusCode: 200}}
	for _, sync := range []bool{false, true} {
		for _, resp := range []string{"xero", "bare"} {
			b.Run("sync="+strconv.FormatBool(sync)+"/resp="+resp, func(b *testing.B) {
				base := base
				if resp == "bare" {
					base = bare // no rate-limit fields at all: learning must cost about nothing
				}
				opts := []Option{WithRules(rules...), WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)),
					WithAppRules("app", strategy.Rule{Limit: 1 << 30, Window: time.Minute})}
				if sync {
					opts = append(opts, WithSync(SyncConfig{}))
				}
				tr, err := New(base, opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer tr.Close()
				b.ReportAllocs()
				for b.Loop() {
					tr.RoundTrip(req)
				}
			})
		}
	}
}

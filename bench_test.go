package ratemonitor

import (
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

type noop struct{ resp *http.Response }

func (n noop) RoundTrip(*http.Request) (*http.Response, error) { return n.resp, nil }

// BenchmarkTransport measures what the Transport adds to a request over a base RoundTripper
// that does nothing, with the default memory store and a minute and a day rule.
func BenchmarkTransport(b *testing.B) {
	base := noop{resp: &http.Response{StatusCode: 200}}
	req, _ := http.NewRequest(http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
	req.Header.Set("Xero-Tenant-Id", "tenant-1")
	b.Run("base-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			base.RoundTrip(req)
		}
	})
	rules := []strategy.Rule{{Limit: 60, Window: time.Minute}, {Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute}}
	b.Run("monitor", func(b *testing.B) {
		tr, err := New(base, WithRules(rules...), WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)))
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		b.ReportAllocs()
		for b.Loop() {
			tr.RoundTrip(req)
		}
	})
	b.Run("monitor-parallel-10000-keys", func(b *testing.B) {
		tr, err := New(base, WithRules(rules...))
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		reqs := make([]*http.Request, 10_000)
		for i := range reqs {
			reqs[i], _ = http.NewRequest(http.MethodGet, "https://h"+strconv.Itoa(i)+".example/", nil)
			tr.RoundTrip(reqs[i])
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				tr.RoundTrip(reqs[i%len(reqs)])
				i += 7
			}
		})
	})
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
	for _, sync := range []bool{false, true} {
		b.Run("sync="+strconv.FormatBool(sync), func(b *testing.B) {
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

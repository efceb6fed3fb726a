package metrics

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/observe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newObserver(t *testing.T, opts Options) (*Observer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o, err := New(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return o, reg
}

// TestEveryMetricExactAfterOneEventOfEachKind feeds one event of each kind and checks every metric's exact value.
func TestEveryMetricExactAfterOneEventOfEachKind(t *testing.T) {
	o, reg := newObserver(t, Options{})
	rules := func(used int) []observe.RuleUsage {
		return []observe.RuleUsage{{Rule: "60/1m0s", Used: used, Limit: 60}}
	}
	for _, e := range []observe.Event{
		{Kind: observe.Recorded, Key: "a", N: 1},
		{Kind: observe.Recorded, Key: "b", N: 2},
		{Kind: observe.Granted, Key: "a", N: 1},
		{Kind: observe.Refused, Key: "a", N: 1, Wait: time.Second},
		{Kind: observe.Waited, Key: "a", N: 1, Wait: 1500 * time.Millisecond},
		{Kind: observe.Paused, Key: "a", Until: time.Unix(5, 0)},
		{Kind: observe.TooManyRequests, Key: "a"},
		{Kind: observe.SkewedDate, Key: "a", Wait: -time.Hour},
		{Kind: observe.StoreError, Store: "redis", Op: "record", Key: "a", Err: errors.New("down")},
		{Kind: observe.StoreError, Store: "redis", Op: "record", Key: "b", Err: errors.New("down")},
		{Kind: observe.EvictedLive, Store: "memory", Key: "a"},
		{Kind: observe.Retry, Store: "dynamodb", Op: "admit", Key: "a", N: 1},
		{Kind: observe.Admitted, Key: "a", N: 1, Rules: rules(30)},
		{Kind: observe.Admitted, Key: "a", N: 1, Rules: rules(45)},
		{Kind: observe.Rejected, Key: "b", N: 1, Wait: time.Second, Rules: rules(61)},
		{Kind: observe.LimitChanged, Key: "ietf:burst:a", Op: "learned", Rules: []observe.RuleUsage{{Rule: "10/1s", Limit: 10}}},
		{Kind: observe.LimitChanged, Key: "ietf:minute:a", Op: "learned", Rules: []observe.RuleUsage{{Rule: "100/1m0s", Limit: 100}}},
		{Kind: observe.LimitChanged, Key: "", Op: "set", Rules: []observe.RuleUsage{{Rule: "5/1s", Limit: 5}}},
		{Kind: observe.LimitChanged, Key: "ietf:minute:a", Op: "shared", Rules: []observe.RuleUsage{{Rule: "50/1m0s", Limit: 50}}},
	} {
		o.Observe(e)
	}
	want := `
# HELP ratemonitor_admitted_total Requests the middleware admitted.
# TYPE ratemonitor_admitted_total counter
ratemonitor_admitted_total 2
# HELP ratemonitor_evicted_live_total Keys whose live state the store had to evict (their counts restart at zero).
# TYPE ratemonitor_evicted_live_total counter
ratemonitor_evicted_live_total{store="memory"} 1
# HELP ratemonitor_limit_changes_total Limits a Transport learned from the upstream or was given at run time, by source (learned, set, shared).
# TYPE ratemonitor_limit_changes_total counter
ratemonitor_limit_changes_total{source="learned"} 2
ratemonitor_limit_changes_total{source="set"} 1
ratemonitor_limit_changes_total{source="shared"} 1
# HELP ratemonitor_recorded_total Requests the Transport recorded (monitoring mode).
# TYPE ratemonitor_recorded_total counter
ratemonitor_recorded_total 3
# HELP ratemonitor_refused_total Requests the middleware refused with 429.
# TYPE ratemonitor_refused_total counter
ratemonitor_refused_total 1
# HELP ratemonitor_reserves_total Reserves the Transport asked of the store, by result (granted, refused).
# TYPE ratemonitor_reserves_total counter
ratemonitor_reserves_total{result="granted"} 1
ratemonitor_reserves_total{result="refused"} 1
# HELP ratemonitor_store_errors_total Store operations that failed, by store and operation.
# TYPE ratemonitor_store_errors_total counter
ratemonitor_store_errors_total{op="record",store="redis"} 2
# HELP ratemonitor_store_retries_total Optimistic-lock retries after a conditional-check failure, by store and operation.
# TYPE ratemonitor_store_retries_total counter
ratemonitor_store_retries_total{op="admit",store="dynamodb"} 1
# HELP ratemonitor_upstream_429_total 429 responses the Transport received from the upstream.
# TYPE ratemonitor_upstream_429_total counter
ratemonitor_upstream_429_total 1
# HELP ratemonitor_upstream_pauses_total Pauses the upstream asked for (429, Retry-After, used-up limits).
# TYPE ratemonitor_upstream_pauses_total counter
ratemonitor_upstream_pauses_total 1
# HELP ratemonitor_upstream_skewed_dates_total Responses whose Date was more than headers.MaxDateSkew from our clock: their Retry-After was measured from our clock.
# TYPE ratemonitor_upstream_skewed_dates_total counter
ratemonitor_upstream_skewed_dates_total 1
# HELP ratemonitor_usage_ratio Used / limit per rule after the middleware's latest decision (per key with per-key labels).
# TYPE ratemonitor_usage_ratio gauge
ratemonitor_usage_ratio{rule="60/1m0s"} 1.0166666666666666
`
	names := []string{"ratemonitor_admitted_total", "ratemonitor_evicted_live_total", "ratemonitor_limit_changes_total", "ratemonitor_recorded_total",
		"ratemonitor_refused_total", "ratemonitor_reserves_total", "ratemonitor_store_errors_total",
		"ratemonitor_store_retries_total", "ratemonitor_upstream_429_total", "ratemonitor_upstream_pauses_total",
		"ratemonitor_upstream_skewed_dates_total", "ratemonitor_usage_ratio"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(o.wait); got != 1 {
		t.Fatalf("wait_seconds: %d series", got)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "ratemonitor_wait_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() != 1.5 {
				t.Fatalf("wait_seconds count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	// A second New on the same registry is refused.
	if _, err := New(reg, Options{}); err == nil {
		t.Fatal("registered twice")
	}
}

// TestKeyLabelsBoundedByMaxKeys: with MaxKeys 3, 1000 distinct keys give 3 key labels and "other",
// and every request is still counted.
func TestKeyLabelsBoundedByMaxKeys(t *testing.T) {
	o, _ := newObserver(t, Options{MaxKeys: 3})
	for i := range 1000 {
		key := "203.0.113." + strconv.Itoa(i)
		o.Observe(observe.Event{Kind: observe.Admitted, Key: key, N: 1,
			Rules: []observe.RuleUsage{{Rule: "5/1s", Used: 1, Limit: 5}}})
		o.Observe(observe.Event{Kind: observe.Recorded, Key: key, N: 1})
	}
	o.Observe(observe.Event{Kind: observe.Admitted, Key: "203.0.113.0", N: 1}) // a known key stays itself
	if got := o.Keys(); got != 3 {
		t.Fatalf("%d keys labelled, want 3", got)
	}
	for name, c := range map[string]prometheus.Collector{"admitted": o.admitted, "recorded": o.recorded, "usage": o.usage} {
		if n := testutil.CollectAndCount(c); n != 4 {
			t.Errorf("%s: %d series, want 4 (3 keys and other)", name, n)
		}
	}
	if got := testutil.ToFloat64(o.admitted.WithLabelValues(otherKey)); got != 997 {
		t.Errorf("other: %v admitted, want 997", got)
	}
	if got := testutil.ToFloat64(o.admitted.WithLabelValues("203.0.113.0")); got != 2 {
		t.Errorf("first key: %v admitted, want 2", got)
	}
	if got := testutil.ToFloat64(o.recorded.WithLabelValues(otherKey)); got != 997 {
		t.Errorf("other: %v recorded, want 997", got)
	}
	if _, err := New(prometheus.NewRegistry(), Options{MaxKeys: -1}); err == nil {
		t.Error("negative MaxKeys accepted")
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil registerer accepted")
	}
}

// TestStateLostAndDegradedExact checks the counters and the gauge of a store's lost state and of the
// Transport's degraded mode, by exact value.
func TestStateLostAndDegradedExact(t *testing.T) {
	o, _ := newObserver(t, Options{})
	for _, e := range []observe.Event{
		{Kind: observe.StateLost, Store: "redis", Op: "restart"},
		{Kind: observe.StateLost, Store: "redis", Op: "eviction", N: 7},
		{Kind: observe.StateLost, Store: "redis", Op: "eviction", N: 1},
		{Kind: observe.Degraded, Store: "redis", Err: errors.New("down")},
	} {
		o.Observe(e)
	}
	if got := testutil.ToFloat64(o.stateLost.WithLabelValues("redis", "restart")); got != 1 {
		t.Errorf("restart: %v, want 1", got)
	}
	if got := testutil.ToFloat64(o.stateLost.WithLabelValues("redis", "eviction")); got != 2 {
		t.Errorf("eviction: %v, want 2", got)
	}
	if got := testutil.ToFloat64(o.degraded.WithLabelValues("redis")); got != 1 {
		t.Errorf("degraded while degraded: %v, want 1", got)
	}
	// A second Transport on the same Observer degrades, then recovers: the first still is.
	o.Observe(observe.Event{Kind: observe.Degraded, Store: "redis", Err: errors.New("down")})
	o.Observe(observe.Event{Kind: observe.Recovered, Store: "redis", Wait: time.Second})
	if got := testutil.ToFloat64(o.degraded.WithLabelValues("redis")); got != 1 {
		t.Errorf("degraded while one of two Transports is: %v, want 1", got)
	}
	o.Observe(observe.Event{Kind: observe.Recovered, Store: "redis", Wait: time.Second})
	if got := testutil.ToFloat64(o.degraded.WithLabelValues("redis")); got != 0 {
		t.Errorf("degraded after both recovered: %v, want 0", got)
	}
	if got := testutil.ToFloat64(o.degradedTotal.WithLabelValues("redis")); got != 2 {
		t.Errorf("degraded_total: %v, want 2", got)
	}
}

// Package metrics turns the events of package observe into Prometheus metrics
// (github.com/prometheus/client_golang).
//
//	reg := prometheus.NewRegistry()
//	obs, err := metrics.New(reg, metrics.Options{})
//	store, _ := cache.NewMemory(cache.MemoryConfig{Observer: obs})
//	limiter, _ := middleware.New(store, s, middleware.WithObserver(obs))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The metrics, all prefixed with Options.Namespace ("ratemonitor" by default):
//
//	recorded_total            counter    requests the Transport recorded (monitoring mode)
//	reserves_total{result}    counter    the Transport's reserves: result "granted" or "refused"
//	admitted_total            counter    requests the middleware admitted
//	refused_total             counter    requests the middleware refused with 429
//	upstream_429_total        counter    429 responses the Transport received
//	upstream_pauses_total     counter    pauses the upstream asked for (WithSync)
//	upstream_skewed_dates_total counter  responses whose Date was too far off to measure Retry-After from
//	store_errors_total{store,op} counter failed store operations
//	evicted_live_total{store} counter    live state the memory store had to evict
//	store_retries_total{store,op} counter optimistic-lock retries (DynamoDB store)
//	store_state_lost_total{store,reason} counter detected losses of shared state (restart, eviction, corrupt)
//	degraded{store}           gauge      Transports pacing locally now because their shared store is unreachable
//	degraded_total{store}     counter    times the Transport entered degraded mode
//	limit_changes_total{source} counter  limits learned from the upstream or set at run time (source "learned", "set", or "shared": read from the store)
//	wait_seconds              histogram  the waits the Transport's callers went through (> 0 only)
//	usage_ratio{rule}         gauge      used / limit per rule after the middleware's latest decision
//
// usage_ratio is what the latest decision said, for the key it was about: without per-key
// labels it jumps between keys and shows how full the most recently served client is, not a
// sum or a maximum. With Options.MaxKeys it is kept per key. The Transport does not feed it:
// its reserve does not return usage, and a poll of Status per key would cost a store read.
//
// Per-key labels (key) are added to recorded_total, reserves_total, admitted_total,
// refused_total, upstream_429_total and usage_ratio only when Options.MaxKeys > 0: the first
// MaxKeys distinct keys seen get a label of their own, every later key is counted under
// key="other", so that a key per client address cannot make the series unbounded.
package metrics

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratemonitor/ratemonitor/observe"
)

// otherKey is the key label of every key beyond Options.MaxKeys.
const otherKey = "other"

// Options configures New. The zero value gives no per-key labels.
type Options struct {
	// Namespace prefixes every metric's name (default "ratemonitor").
	Namespace string
	// MaxKeys, when above 0, adds a key label to the per-key metrics (see the package
	// comment) for at most MaxKeys distinct keys; later keys share key="other".
	MaxKeys int
	// Buckets are wait_seconds's buckets in seconds (default: 1 ms to about 2 min,
	// exponential by 4).
	Buckets []float64
}

// Observer is an observe.Observer that updates Prometheus metrics. It is safe for concurrent
// use. Make one with New.
type Observer struct {
	maxKeys int

	recorded, admitted, refused, tooMany *prometheus.CounterVec
	reserves                             *prometheus.CounterVec
	pauses, skewedDates                  prometheus.Counter
	storeErrors, retries, evicted        *prometheus.CounterVec
	stateLost, degradedTotal             *prometheus.CounterVec
	limitChanges                         *prometheus.CounterVec
	degraded                             *prometheus.GaugeVec
	wait                                 prometheus.Histogram
	usage                                *prometheus.GaugeVec

	mu   sync.Mutex
	keys map[string]struct{} // keys with a label of their own
}

var _ observe.Observer = (*Observer)(nil)

// New registers the metrics with reg and returns the Observer that feeds them. It fails when
// reg already holds metrics of those names (for example a second New on one registry with the
// same Namespace).
func New(reg prometheus.Registerer, opts Options) (*Observer, error) {
	if reg == nil {
		return nil, errors.New("ratemonitor: metrics: nil Registerer")
	}
	if opts.MaxKeys < 0 {
		return nil, errors.New("ratemonitor: metrics: negative MaxKeys")
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "ratemonitor"
	}
	if opts.Buckets == nil {
		opts.Buckets = prometheus.ExponentialBuckets(0.001, 4, 10)
	}
	var keyLabel []string
	if opts.MaxKeys > 0 {
		keyLabel = []string{"key"}
	}
	with := func(extra ...string) []string { return append(append([]string(nil), extra...), keyLabel...) }
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	o := &Observer{
		maxKeys:       opts.MaxKeys,
		keys:          map[string]struct{}{},
		recorded:      counter("recorded_total", "Requests the Transport recorded (monitoring mode).", with()),
		reserves:      counter("reserves_total", "Reserves the Transport asked of the store, by result (granted, refused).", with("result")),
		admitted:      counter("admitted_total", "Requests the middleware admitted.", with()),
		refused:       counter("refused_total", "Requests the middleware refused with 429.", with()),
		tooMany:       counter("upstream_429_total", "429 responses the Transport received from the upstream.", with()),
		storeErrors:   counter("store_errors_total", "Store operations that failed, by store and operation.", []string{"store", "op"}),
		retries:       counter("store_retries_total", "Optimistic-lock retries after a conditional-check failure, by store and operation.", []string{"store", "op"}),
		evicted:       counter("evicted_live_total", "Keys whose live state the store had to evict (their counts restart at zero).", []string{"store"}),
		stateLost:     counter("store_state_lost_total", "Detected losses of shared state (the server restarted, evicted keys, or held an unreadable value), by store and reason.", []string{"store", "reason"}),
		limitChanges:  counter("limit_changes_total", "Limits a Transport learned from the upstream or was given at run time, by source (learned, set, shared).", []string{"source"}),
		degradedTotal: counter("degraded_total", "Times the Transport entered degraded mode (local pacing while the shared store is unreachable).", []string{"store"}),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "degraded",
			Help: "Transports pacing on a local store now because their shared store is unreachable (0 when none)."}, []string{"store"}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "upstream_pauses_total",
			Help: "Pauses the upstream asked for (429, Retry-After, used-up limits)."}),
		skewedDates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "upstream_skewed_dates_total",
			Help: "Responses whose Date was more than headers.MaxDateSkew from our clock: their Retry-After was measured from our clock."}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "wait_seconds",
			Help: "Time the Transport's callers waited for room (paced requests, Reserve, Wait); waits of 0 are not observed.", Buckets: opts.Buckets}),
		usage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "usage_ratio",
			Help: "Used / limit per rule after the middleware's latest decision (per key with per-key labels)."}, with("rule")),
	}
	for _, c := range []prometheus.Collector{o.recorded, o.reserves, o.admitted, o.refused, o.tooMany,
		o.storeErrors, o.retries, o.evicted, o.stateLost, o.limitChanges, o.degradedTotal, o.degraded, o.pauses, o.skewedDates, o.wait, o.usage} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// The results and kinds known up front are shown at 0 from the start.
	if o.maxKeys == 0 {
		o.recorded.WithLabelValues()
		o.reserves.WithLabelValues("granted")
		o.reserves.WithLabelValues("refused")
		o.admitted.WithLabelValues()
		o.refused.WithLabelValues()
		o.tooMany.WithLabelValues()
	}
	return o, nil
}

// keyLabel returns the label values for key: none without per-key labels, key itself for the
// first MaxKeys distinct keys, otherKey after.
func (o *Observer) keyLabel(key string, extra ...string) []string {
	if o.maxKeys == 0 {
		return extra
	}
	o.mu.Lock()
	if _, ok := o.keys[key]; !ok {
		if len(o.keys) >= o.maxKeys {
			key = otherKey
		} else {
			o.keys[key] = struct{}{}
		}
	}
	o.mu.Unlock()
	return append(extra, key)
}

// Observe implements observe.Observer.
func (o *Observer) Observe(e observe.Event) {
	switch e.Kind {
	case observe.Recorded:
		o.recorded.WithLabelValues(o.keyLabel(e.Key)...).Add(float64(e.N))
	case observe.Granted:
		o.reserves.WithLabelValues(o.keyLabel(e.Key, "granted")...).Inc()
	case observe.Refused:
		o.reserves.WithLabelValues(o.keyLabel(e.Key, "refused")...).Inc()
	case observe.Waited:
		o.wait.Observe(e.Wait.Seconds())
	case observe.Paused:
		o.pauses.Inc()
	case observe.SkewedDate:
		o.skewedDates.Inc()
	case observe.TooManyRequests:
		o.tooMany.WithLabelValues(o.keyLabel(e.Key)...).Inc()
	case observe.StoreError:
		o.storeErrors.WithLabelValues(e.Store, e.Op).Inc()
	case observe.EvictedLive:
		o.evicted.WithLabelValues(e.Store).Inc()
	case observe.Retry:
		o.retries.WithLabelValues(e.Store, e.Op).Inc()
	case observe.StateLost:
		o.stateLost.WithLabelValues(e.Store, e.Op).Inc()
	case observe.Degraded:
		o.degradedTotal.WithLabelValues(e.Store).Inc()
		o.degraded.WithLabelValues(e.Store).Inc() // one per Transport: several may share the Observer
	case observe.Recovered:
		o.degraded.WithLabelValues(e.Store).Dec()
	case observe.LimitChanged:
		o.limitChanges.WithLabelValues(e.Op).Inc()
	case observe.Admitted, observe.Rejected:
		if e.Kind == observe.Admitted {
			o.admitted.WithLabelValues(o.keyLabel(e.Key)...).Inc()
		} else {
			o.refused.WithLabelValues(o.keyLabel(e.Key)...).Inc()
		}
		for _, r := range e.Rules {
			if r.Limit > 0 {
				o.usage.WithLabelValues(o.keyLabel(e.Key, r.Rule)...).Set(float64(r.Used) / float64(r.Limit))
			}
		}
	}
}

// Keys returns how many distinct keys have a label of their own (at most Options.MaxKeys).
func (o *Observer) Keys() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.keys)
}

package ratemonitor

import (
	"time"

	"github.com/ratemonitor/ratemonitor/internal/smoothing"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// minSpan returns a lower bound on the time from the first to the last of k requests granted
// one after another under s, whatever the state: what a waiter with k−n requests queued ahead
// of it must wait beyond the first of them, when k is more than s.MaxBurst and Peek cannot be
// asked for k at once. Per rule, with N its effective limit and W its effective window:
//
//   - rolling window: every request is held at least W (buckets never free a slot early), so
//     any interval of W holds at most N grants: (⌈k/N⌉−1)·W;
//   - fixed window: k requests fill at least ⌈k/N⌉ windows: (⌈k/N⌉−2)·W;
//   - token bucket: a bucket of at most Limit tokens refilled at Limit per W: (k−Limit)·W/Limit;
//   - smoothed (smoothing.Interval T, smoothing.Burst b): (k−b)·T.
//
// An algorithm it does not know adds nothing; the largest bound of all the rules is returned.
func minSpan(s *engine.Strategy, k int) time.Duration {
	var span time.Duration
	for _, r := range s.Rules() {
		n, w := r.EffectiveLimit(), r.EffectiveWindow()
		fills := (k + n - 1) / n
		var d time.Duration
		switch s.Name() {
		case "rollingwindow":
			d = time.Duration(fills-1) * w
		case "fixedwindow":
			d = time.Duration(max(fills-2, 0)) * w
		case "tokenbucket":
			d = time.Duration(float64(max(k-r.Limit, 0)) * float64(w) / float64(r.Limit))
		}
		if s.Smoothing() {
			d = max(d, time.Duration(max(k-smoothing.Burst(r), 0))*smoothing.Interval(r))
		}
		span = max(span, d)
	}
	return span
}

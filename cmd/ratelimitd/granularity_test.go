package main

import (
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// Guards -granularity 0 (and its help): the library's default bucket (strategy.Rule.Bucket),
// not ratelimitd's old rule (1 s, or window/1000 over 1000 s: 1 s for 10 min, where the
// library keeps 10 s); window/1000 only where the library's default would cut the window into
// more than 1000 buckets (a prime number of seconds: the default is 1 s).
func TestGranularityDefaultIsLibraryBucket(t *testing.T) {
	for _, tc := range []struct {
		window, want time.Duration
	}{
		{time.Minute, time.Second},
		{10 * time.Minute, 10 * time.Second},
		{15 * time.Minute, 15 * time.Second},
		{time.Hour, time.Minute},
		{24 * time.Hour, 24 * time.Minute},
		{time.Hour + time.Second, 13 * time.Second},     // 3 601 s = 13 · 277: 278 buckets
		{1009 * time.Second, 1009 * time.Millisecond},   // prime: 1 s would be 1 010 buckets
		{10007 * time.Second, 10007 * time.Millisecond}, // prime: 1 s would be over redisstore.MaxBuckets
	} {
		t.Run(tc.window.String(), func(t *testing.T) {
			c := config{limit: 10, window: tc.window, strategy: "rollingwindow"}
			s, err := c.rules()
			if err != nil {
				t.Fatalf("-window %v: %v", tc.window, err)
			}
			got := s.Rules()[0].Bucket()
			if got != tc.want {
				t.Errorf("-window %v -granularity 0: bucket %v, want %v", tc.window, got, tc.want)
			}
			if lib := (strategy.Rule{Limit: 10, Window: tc.window}).Bucket(); tc.window/lib <= maxDefaultBuckets && got != lib {
				t.Errorf("-window %v -granularity 0: bucket %v, the library's default is %v", tc.window, got, lib)
			}
		})
	}
}

package main

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/loadtest"
)

// TestLoadAdmitsExactlyLimitPerKey is the loopback load test, bounded in count and time: 4 000
// requests over 20 keys with a limit of 100 each admit exactly 2 000, none over the limit, none
// failed. All 4 000 must be sent within 4 minutes: about 17 s over SQLite under -race idle, so
// that a loaded machine has room (the bound was 50 s); the rate is logged, not asserted.
func TestLoadAdmitsExactlyLimitPerKey(t *testing.T) {
	for _, store := range []string{"memory", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			// A token bucket refilling 100 over 24 h gains no token during the test, and has no
			// window edge to cross: each key's admissions are exactly 100.
			s := start(t, "-store", store, "-strategy", "tokenbucket", "-limit", "100", "-window", "24h")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := loadtest.Run(ctx, loadtest.Config{URL: s.url + "/ping", Requests: 4000, Concurrency: 16, Keys: 20, MaxDuration: 4 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res)
			if res.Sent != 4000 || res.Admitted != 2000 || res.Refused != 2000 || res.Failed != 0 || res.OverAdmitted(100) != 0 {
				t.Errorf("%v (first failure %q); want 4000 sent, 2000 admitted, 0 over the limit", res, res.FirstFailure)
			}
			if got := s.audited(t); len(got) != 20 || got["key:load-7"] != 100 {
				t.Errorf("api_calls per key = %v, want 100 for each of 20 keys", got)
			}
		})
	}
}

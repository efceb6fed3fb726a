package docs

import (
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// fixedHour is docs/sync.md's Fixed windows example: an upstream that counts 1000 an hour in
// fixed hours and says so in X-RateLimit-* fields.
func fixedHour() error {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(strategy.Rule{Limit: 1000, Window: time.Hour}),
		ratemonitor.WithSync(ratemonitor.SyncConfig{
			XRateLimitWindow: time.Hour, // the X-RateLimit-* fields are about the hour
			// The upstream counts the hour in fixed windows: free the rule at its reset, and
			// while the reset is unknown, let one request ask every 2 minutes.
			Fixed: map[time.Duration]time.Duration{time.Hour: 2 * time.Minute},
		}),
		ratemonitor.WithPacing())
	if err != nil {
		return err
	}
	defer tr.Close()
	return nil
}

var _ = fixedHour

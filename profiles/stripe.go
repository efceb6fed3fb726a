package profiles

import (
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Stripe's global limit in live mode: 100 operations a second per account (25 in a sandbox).
// Source: Stripe, "Rate limits", https://docs.stripe.com/rate-limits.
const stripeLiveLimit = 100

// Stripe paces a Stripe API client in live mode: requests are keyed by their secret key (a
// digest of the Authorization header: Stripe counts per account), each held to 100 a second,
// counted in 10 ms buckets with a 20 ms margin (98 a second) for the time between recording a
// request and Stripe counting it.
//
// Stripe's limits come without rate-limit header fields: a 429 pauses the key for its
// Retry-After if it has one, and else for the fallback, 1 s, one window. Stricter limits of
// single endpoints (25 a second by default, on the same page) are not paced here. Two secret
// keys of one account (restricted keys) are counted apart here, though Stripe counts them
// together: give them one key (WithKeyFunc) if you use several.
func Stripe() Profile {
	return Profile{
		Name:   "profiles.Stripe",
		Key:    byCredential,
		Rules:  []strategy.Rule{{Limit: stripeLiveLimit, Window: time.Second, Granularity: 10 * time.Millisecond, Margin: 20 * time.Millisecond}},
		Sync:   &ratemonitor.SyncConfig{Readers: []headers.Reader{}, Fallback: time.Second},
		Pacing: true,
	}
}

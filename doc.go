// Package ratemonitor paces a program's calls to rate-limited HTTP APIs (Xero, GitHub, Shopify,
// any SaaS): a [Transport] counts every request under its key (a tenant, a token, a host)
// against the upstream's limits, and waits before sending when a limit is reached.
//
// Make one Transport per upstream when the program starts, share it, and [Transport.Close] it
// at shutdown: it holds the counts, so one made per call starts from zero every time. A
// profile ([github.com/ratemonitor/ratemonitor/profiles]) sets an API's limits, keys and
// headers as its owner documents them:
//
//	tr, err := ratemonitor.New(http.DefaultTransport, profiles.Xero("xero-app:"+clientID).Options()...)
//	if err != nil { ... }
//	client := &http.Client{Transport: tr}
//
// Profiles pace ([WithPacing]): each request waits for its key's turn, so any number of
// goroutines never send more than a limit allows, and a request whose context's deadline
// comes before its turn fails at once, sending nothing. They also learn from the answers
// ([WithSync]: Retry-After, remaining counts). Without a profile, give the rules and the key:
// New(base, [WithRules](...), [WithKeyFunc](...), WithPacing()). Without WithPacing the
// Transport only counts, and [Transport.AllocationUsed] and [Transport.WaitSeconds] say how
// much of each rule a key has used and how long until a burst fits. [WithStore] shares the
// counts between processes (Redis: package cache/redisstore). A request recorded at instant s
// counts at t when s ≤ t < s+W, and no wait is ever early. [WithMeter] charges each request
// on a second limit in its own unit (GitHub's points a minute), seen in [Transport.Status]; a
// profile is a value whose figures can be changed before New.
//
// Guides: [Pace requests], [Rules], [Meters], [Stores], [Learn from the upstream], [Profiles].
//
// [Pace requests]: https://github.com/ratemonitor/ratemonitor/blob/main/docs/pacing.md
// [Rules]: https://github.com/ratemonitor/ratemonitor/blob/main/docs/rules.md
// [Meters]: https://github.com/ratemonitor/ratemonitor/blob/main/docs/meters.md
// [Stores]: https://github.com/ratemonitor/ratemonitor/blob/main/docs/stores.md
// [Learn from the upstream]: https://github.com/ratemonitor/ratemonitor/blob/main/docs/sync.md
// [Profiles]: https://github.com/ratemonitor/ratemonitor/blob/main/docs/profiles.md
package ratemonitor

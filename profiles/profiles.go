// Package profiles holds ready-made settings for popular APIs: for each, the rules, the key a
// request is counted under, its other meters, the readers of what the upstream says
// (WithSync) and request costs, as documented by the API's owner (each constructor cites its
// page).
//
// A profile is a value (Profile), so that pacing a Xero client takes three lines:
//
//	tr, err := ratemonitor.New(http.DefaultTransport, profiles.Xero("xero-app:my-client-id").Options()...)
//	if err != nil { ... }
//	client := &http.Client{Transport: tr}
//
// Every profile paces (ratemonitor.WithPacing) and syncs (ratemonitor.WithSync). Append
// options to add to it, such as a shared store:
//
//	opts := append(profiles.GitHubREST().Options(), ratemonitor.WithStore(redisStore))
//
// To change a limit, change the value before Options: a figure of another plan or a scaled-down
// test (p.Rules[0].Limit), a meter dropped or added (p.Meters). Figures that depend on the
// account's plan are the constructor's arguments, or the documented default plan's, as each
// says. Errors, in those arguments or in what was changed, are returned by ratemonitor.New.
//
// Keys built from a credential (GitHub, HubSpot, Stripe, Slack: the token is the account)
// are a keyed hash of the Authorization header (ratemonitor.KeyByHeader: HMAC-SHA-256 under
// ratemonitor.DefaultKeySecret, or a fleet's own secret with KeyByHashedHeader), never the
// token itself, so that no credential reaches a store's keys or an error message.
package profiles

import "github.com/ratemonitor/ratemonitor"

// byCredential keys a request by its Authorization header, hashed (ratemonitor.KeyByHeader:
// an HMAC-SHA-256 under ratemonitor.DefaultKeySecret, "hmac:" and 32 hex digits), and a
// request without one by its host: the account a token belongs to is what these upstreams
// count under, and the token itself must never be a key. A fleet with a secret of its own
// appends ratemonitor.WithKeyFunc(ratemonitor.KeyByHashedHeader("Authorization", secret, nil)).
var byCredential = ratemonitor.KeyByHeader("Authorization", nil)

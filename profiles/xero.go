package profiles

import (
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Xero's limits. Source: Xero, "OAuth 2.0 API limits",
// https://developer.xero.com/documentation/guides/oauth2/limits/#api-rate-limits: per tenant
// (organisation) 60 calls a minute, 5000 a day and 5 in progress at once; per app 10 000 calls a
// minute across all tenants. Xero counts the day in "a fixed window which will reset at
// different times for each tenant" (its page); the rules here are rolling windows, which never
// allow more than a fixed window of the same length does in any span of that length.
const (
	XeroMinuteLimit    = 60
	XeroDayLimit       = 5000
	XeroInFlight       = 5
	XeroAppMinuteLimit = 10_000
)

// Xero paces a Xero API client: requests are keyed by their Xero-Tenant-Id header (the
// tenant; a request without one by its host), each tenant held to 60 a minute and 5000 a day,
// and every request also counted under appKey (choose one no tenant id can be, such as
// "xero-app:<client id>") against the app's 10 000 a minute. Each minute rule keeps a 1 s
// margin for the time between recording a request and Xero counting it. The day rule keeps a
// 1 min margin: more than that delay needs, and a whole minute keeps Window+Margin (24h1m) a
// whole number of minutes, so the default granularity is its sixtieth, 24m1s, and a tenant's
// day is at most 61 buckets on every store (a 10 s margin would give 10 s buckets, up to 8 642;
// a 1 s one 7 s buckets, up to 12 344, more than Redis takes). The minute costs 1/1441 of the
// day's throughput. The 24m1s buckets free a day's slot less than 24m1s late, never early: at
// any instant only one bucket's requests are held past their day, about 1/60 of them (some 83
// of 5 000) for a tenant in steady traffic at its limit. For exact 1 s buckets, copy the rules
// with Granularity: time.Second on the day rule: the memory and SQLite stores keep them (about
// 5 000 buckets a tenant after a steady day, 38 times the bytes; docs/performance.md), the
// Redis and DynamoDB stores refuse a day of them.
//
// It reads Xero's X-MinLimit-Remaining, X-DayLimit-Remaining and X-AppMinLimit-Remaining on
// every response (headers.XeroReader), and a 429's Retry-After with X-Rate-Limit-Problem
// (minute, day, appminute, compared case-insensitively) pauses the tenant, or the app key.
// Xero's third limit, 5 calls in progress per tenant, is held too (ratemonitor.WithInFlight):
// a sixth call waits until one of the five has its response closed. A 429 without Retry-After
// (Xero's concurrent limit, when another client of the tenant has calls in progress) pauses
// the tenant for 1 s (SyncConfig.Fallback). In-flight slots are
// leases in the store, so the store must hold them (cache.Leaser: the memory and Redis
// stores); New refuses the profile over the SQLite and DynamoDB stores.
func Xero(appKey string) Profile {
	if appKey == "" {
		return failed("profiles.Xero", `Xero(""): the app key must not be empty: give one no tenant id can be, such as "xero-app:<client id>"`)
	}
	return Profile{
		Name: "profiles.Xero",
		Key:  ratemonitor.KeyByHeader("Xero-Tenant-Id", nil),
		Rules: []strategy.Rule{
			{Limit: XeroMinuteLimit, Window: time.Minute, Margin: time.Second},
			{Limit: XeroDayLimit, Window: 24 * time.Hour, Margin: time.Minute}},
		Meters: []ratemonitor.Meter{{Name: "app", AppKey: appKey,
			Rules: []strategy.Rule{{Limit: XeroAppMinuteLimit, Window: time.Minute, Margin: time.Second}}}},
		InFlight: XeroInFlight,
		// Fallback: Xero sends Retry-After with its minute and day 429s; the one without is
		// the concurrent limit's (X-Rate-Limit-Problem: concurrent), where a slot frees as soon
		// as a call in progress ends: a second, not the default minute.
		Sync:   &ratemonitor.SyncConfig{Readers: []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour)}, Fallback: time.Second},
		Pacing: true,
	}
}

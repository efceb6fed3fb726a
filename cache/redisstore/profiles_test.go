package redisstore

import (
	"context"
	"net/http"
	"testing"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestProfilesAccepted: every profile can be shared over Redis, the store of a fleet (the
// Xero and HubSpot day rules once counted in 1 s buckets, 86 402 a key, which New refused),
// and one paced call through it is counted under every rule.
func TestProfilesAccepted(t *testing.T) {
	srv := redistest.Start(t)
	for name, p := range map[string][]ratemonitor.Option{
		"Xero": profiles.Xero("xero-app:test").Options(), "GitHubREST": profiles.GitHubREST().Options(), "GitHubGraphQL": profiles.GitHubGraphQL(nil).Options(),
		"ShopifyREST": profiles.ShopifyREST().Options(), "ShopifyGraphQL": profiles.ShopifyGraphQL(1000, 1, nil).Options(), // 1 point a second back: a slow machine does not refill the one reserved before it is read
		"HubSpot": profiles.HubSpot().Options(), "Stripe": profiles.Stripe().Options(), "Slack": profiles.Slack(3).Options(),
	} {
		t.Run(name, func(t *testing.T) {
			st := newStore(t, srv.Client(), Options{Prefix: "profile-" + name})
			tr, err := ratemonitor.New(http.DefaultTransport, append(p, ratemonitor.WithStore(st))...)
			if err != nil {
				t.Fatalf("New over the Redis store: %v", err)
			}
			defer tr.Close()
			ctx := context.Background()
			r, err := tr.Reserve(ctx, "key-1", 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Remaining() != 1 {
				t.Fatalf("reservation holds %d slots, want 1", r.Remaining())
			}
			used, err := tr.AllocationUsed(ctx, "key-1")
			if err != nil {
				t.Fatal(err)
			}
			for i, u := range used {
				if u.Used != 1 {
					t.Errorf("rule %d (%v): %d used, want 1", i, u.Rule, u.Used)
				}
			}
			if len(used) != len(tr.Rules()) || len(used) == 0 {
				t.Errorf("%d usages for %d rules", len(used), len(tr.Rules()))
			}
		})
	}
}

package profiles_test

import (
	"net/http"
	"testing"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestProfileReusedInManyNewCalls passes each profile's options, made once, to New four times:
// alone and with a store of the caller's, in turn. Every New must succeed with the same rules:
// a profile is a value a program may use for several Transports.
func TestProfileReusedInManyNewCalls(t *testing.T) {
	for _, p := range []struct {
		name string
		opts []ratemonitor.Option
	}{
		{"Xero", profiles.Xero("xero-app:reuse").Options()},
		{"GitHubREST", profiles.GitHubREST().Options()},
		{"GitHubGraphQL", profiles.GitHubGraphQL(nil).Options()},
		{"HubSpot", profiles.HubSpot().Options()},
		{"ShopifyREST", profiles.ShopifyREST().Options()},
		{"ShopifyGraphQL", profiles.ShopifyGraphQL(1000, 50, nil).Options()},
		{"Slack", profiles.Slack(2).Options()},
		{"Stripe", profiles.Stripe().Options()},
	} {
		t.Run(p.name, func(t *testing.T) {
			var first string
			for i := range 4 {
				opts := p.opts
				if i%2 == 1 {
					m, err := cache.NewMemory(cache.MemoryConfig{})
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					opts = append(opts[:len(opts):len(opts)], ratemonitor.WithStore(m))
				}
				tr, err := ratemonitor.New(http.DefaultTransport, opts...)
				if err != nil {
					t.Fatalf("New %d: %v", i+1, err)
				}
				rules := fmtRules(tr)
				tr.Close()
				if i == 0 {
					first = rules
				} else if rules != first {
					t.Fatalf("New %d: rules %s, want the first New's %s", i+1, rules, first)
				}
			}
		})
	}
}

func fmtRules(tr *ratemonitor.Transport) string {
	s := ""
	for _, r := range tr.Rules() {
		s += r.String() + "; "
	}
	if k, ok := tr.AppKey(); ok {
		s += "app " + k
	}
	return s
}

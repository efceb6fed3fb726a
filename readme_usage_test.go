package ratemonitor_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/profiles"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// The README's first snippets, compiled here; TestREADMEUsageSnippets keeps them the same.

func paceXero(clientID string) error {
	// README: Pace a Xero client in three lines
	tr, err := ratemonitor.New(http.DefaultTransport, profiles.Xero("xero-app:"+clientID)...)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: tr} // make it once and share it: tr holds the counts
	// end
	_ = client
	return tr.Close()
}

// README: Rules of your own
// newXeroClient is called once, at start-up; Close the Transport at shutdown.
func newXeroClient() (*ratemonitor.Transport, *http.Client, error) {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(
			strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}, // Xero: 60 per minute
			strategy.Rule{Limit: 5000, Window: 24 * time.Hour},                 // and 5000 per day
		),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)))
	if err != nil {
		return nil, nil, err
	}
	return tr, &http.Client{Transport: tr}, nil
}

func syncInvoices(ctx context.Context, tr *ratemonitor.Transport, client *http.Client, tenantID string) error {
	// Before a burst of 10 requests for the tenant: how long until they fit?
	secs, err := tr.WaitSeconds(ctx, tenantID, 10) // rounded up: sleeping this long is never early
	if err != nil {
		return err
	}
	time.Sleep(time.Duration(secs) * time.Second) // or tr.Wait(ctx, tenantID, 10), which honours ctx
	for range 10 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Xero-Tenant-Id", tenantID) // the key; add your Authorization header too
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	return nil
}

// end

// README: Request cost
func shopifyCost(estimate func(*http.Request) int) error {
	// import "github.com/ratemonitor/ratemonitor/cost" and ".../tokenbucket"
	rule, err := tokenbucket.Rule(1000, 50) // your plan's bucket (points) and restore rate (points a second)
	if err != nil {
		return err
	}
	bucket, err := tokenbucket.New(rule)
	if err != nil {
		return err
	}
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithStrategy(bucket),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHost), // one bucket per shop
		ratemonitor.WithPacing(),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}),               // takes the points Shopify says remain
		ratemonitor.WithCost(estimate),                               // func(*http.Request) int: your estimate
		ratemonitor.WithCostReport(cost.ShopifyGraphQL(rule.Window))) // then Shopify's word
	// end
	if err != nil {
		return err
	}
	return tr.Close()
}

var _, _ = paceXero, syncInvoices

// TestREADMECostSnippet: the Request cost snippet makes a Transport.
func TestREADMECostSnippet(t *testing.T) {
	if err := shopifyCost(func(*http.Request) int { return 10 }); err != nil {
		t.Fatal(err)
	}
}

// TestREADMEUsageSnippets: the Go blocks of the README's first two Usage subsections are, line
// for line (tabs and gofmt's alignment aside), the code above, which the compiler checks.
func TestREADMEUsageSnippets(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("readme_usage_test.go")
	if err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	src := norm(string(self))
	for _, heading := range []string{"### Pace a Xero client in three lines", "### Rules of your own", "### Request cost"} {
		i := strings.Index(string(readme), heading)
		if i < 0 {
			t.Fatalf("README has no %q", heading)
		}
		rest := string(readme)[i:]
		a := strings.Index(rest, "```go\n")
		b := strings.Index(rest[a+6:], "```")
		block := rest[a+6 : a+6+b]
		// the import block is the file's own
		if j := strings.Index(block, ")\n\n"); strings.HasPrefix(block, "import (") && j > 0 {
			block = block[j+3:]
		}
		if !strings.Contains(src, norm(block)) {
			t.Errorf("the README's snippet under %q is not the compiled code of readme_usage_test.go:\n%s", heading, block)
		}
	}
}

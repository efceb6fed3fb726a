package ratemonitor

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

// The Transport's own work on the common path (no mark from a Transport further out, no
// Reservation, no WithCost or WithCostReport, no app rules, no in-flight limit, a store no other
// Transport uses) allocates nothing: no charge on the heap, no request copy, no context; nor
// does learning from a response without rate-limit fields (WithSync). Over a
// store that allocates nothing itself (noopStore, bench_test.go), so that the figure is the
// Transport's whatever the memory store's is.
func TestRoundTripAllocatesNothingOnTheCommonPath(t *testing.T) {
	rules := []strategy.Rule{
		{Limit: 1 << 30, Window: time.Minute, Margin: time.Second},
		{Limit: 1 << 30, Window: 24 * time.Hour},
	}
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"monitor", nil},
		{"paced", []Option{WithPacing()}},
		{"monitor/SendNothing", []Option{WithStoreErrorPolicy(SendNothing)}},
		{"paced/SendUncounted", []Option{WithPacing(), WithStoreErrorPolicy(SendUncounted)}},
		// The response carries no rate-limit field: the default readers find nothing, and
		// nothing is kept.
		{"monitor/sync", []Option{WithSync(SyncConfig{})}},
		{"paced/sync", []Option{WithPacing(), WithSync(SyncConfig{})}},
		// Xero's app meter: its charge is the same for every request (costing.fixed).
		{"monitor/app meter", []Option{WithAppRules("xero-app", strategy.Rule{Limit: 1 << 30, Window: time.Minute})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := noop{resp: &http.Response{StatusCode: 200}}
			opts := append([]Option{WithRules(rules...), WithKeyFunc(KeyByHeader("Xero-Tenant-Id", nil)), WithStore(&noopStore{})}, tc.opts...)
			tr, err := New(base, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
			req.Header.Set("Xero-Tenant-Id", "tenant-1")
			got := testing.AllocsPerRun(1000, func() {
				if _, err := tr.RoundTrip(req); err != nil {
					t.Fatal(err)
				}
			})
			if got != 0 {
				t.Errorf("RoundTrip allocates %v times per request on the common path, want 0", got)
			}
		})
	}
}

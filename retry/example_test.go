package retry_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/retry"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// A client for Xero that paces every attempt, learns from Xero's headers, and retries 429s
// and 5xx through go-retryablehttp. The README shows the same code.
func Example() {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(
			strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second},
			strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}),
		ratemonitor.WithAppRules("xero-app", strategy.Rule{Limit: 10_000, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithSync(ratemonitor.SyncConfig{}), // Xero's and the IETF headers by default
		ratemonitor.WithPacing())
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	client := retry.NewClient(tr).StandardClient() // an *http.Client; or use the retryablehttp.Client

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Xero-Tenant-Id", "tenant-id")
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}

	st, err := tr.Status(ctx, "tenant-id")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, u := range st.Rules {
		fmt.Printf("%v: %d used, %d remaining; Xero last said %d remaining (at %v)\n",
			u.Rule, u.Used, u.Remaining, u.Reported, u.ReportedAt)
	}
	fmt.Println("paused until", st.PausedUntil, "app:", st.Meters[0].Rules[0].Used)
}

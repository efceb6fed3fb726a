package docs

import (
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// newPacedXero is called once, at start-up, like NewXero; Close the Transport at shutdown.
func newPacedXero() (*ratemonitor.Transport, *http.Client, error) {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(
			strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}, // Xero: 60 per minute
			strategy.Rule{Limit: 5000, Window: 24 * time.Hour},                 // and 5000 per day
		),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)), // one count per tenant
		ratemonitor.WithPacing(),    // wait for a slot before sending, from any number of goroutines
		ratemonitor.WithInFlight(5)) // and at most 5 of a tenant's requests at once
	if err != nil {
		return nil, nil, err
	}
	return tr, &http.Client{Transport: tr}, nil
}

package docs

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

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

func monitoring(ctx context.Context) error {
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}))
	if err != nil {
		return err
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	if err := tr.Wait(ctx, "api.example.com", 10); err != nil { // the key: the host (KeyByHost)
		return err // room for 10 now, or the context ended first
	}
	for range 10 {
		resp, err := client.Get("https://api.example.com/v1/items") // each one is recorded
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	return nil
}

func pacing(req *http.Request) error {
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithPacing())
	if err != nil {
		return err
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	// From as many goroutines as you like; a request whose context deadline comes before its
	// slot fails at once with an error wrapping context.DeadlineExceeded, and is neither sent nor counted.
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func reserve(ctx context.Context, tr *ratemonitor.Transport, client *http.Client, reqs []*http.Request) error {
	r, err := tr.Reserve(ctx, "tenant-1", len(reqs)) // len(reqs) slots at once, waiting for them if paced
	if err != nil {
		return err
	}
	for i, req := range reqs {
		resp, err := client.Do(req.WithContext(r.Context(req.Context()))) // spends one of the slots
		if err != nil {
			r.Cancel(ctx) // gives back the slots no request used
			return fmt.Errorf("request %d of %d: %w", i+1, len(reqs), err)
		}
		resp.Body.Close()
	}
	return nil
}

func inFlight(req *http.Request) error {
	tr, err := ratemonitor.New(http.DefaultTransport,
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute, Margin: time.Second}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithPacing(),
		ratemonitor.WithInFlight(5)) // Xero: 5 calls in progress per tenant
	if err != nil {
		return err
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	// From 10 goroutines per tenant: never more than 5 of a tenant's requests in flight.
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close() // frees the slot (so does reading the body to EOF)
	return nil
}

func smoothing() (*ratemonitor.Transport, error) {
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithPacing(), ratemonitor.WithSmoothing()) // 30 at once from idle, then one every 1.935484 s
	if err != nil {
		return nil, err
	}
	return tr, nil
}

func priorities(ctx context.Context, client *http.Client, url string) error {
	ctx = ratemonitor.WithPriority(ctx, ratemonitor.PriorityInteractive) // or PriorityBatch
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req) // served before the batch requests queued on its key
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

package docs

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/profiles"
)

var xeroAPI = "https://api.xero.com"

// Xero is the program's one client for Xero: make it once, at start-up, and share it.
// Its Transport holds the counts; a Transport made per call would start from zero every time.
type Xero struct {
	tr     *ratemonitor.Transport
	client *http.Client
}

func NewXero(clientID string) (*Xero, error) {
	tr, err := ratemonitor.New(http.DefaultTransport, profiles.Xero("xero-app:"+clientID).Options()...)
	if err != nil {
		return nil, err
	}
	return &Xero{tr: tr, client: &http.Client{Transport: tr}}, nil
}

// Invoices is safe from any number of goroutines: each request waits for its tenant's turn.
func (x *Xero) Invoices(ctx context.Context, tenantID, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, xeroAPI+"/api.xro/2.0/Invoices", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Xero-Tenant-Id", tenantID) // the key: each tenant has its own allowance
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := x.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close() // frees the tenant's in-flight slot
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("xero: GET Invoices for tenant %s: %s", tenantID, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// Close is for shutdown: it stops the Transport's background work.
func (x *Xero) Close() error { return x.tr.Close() }

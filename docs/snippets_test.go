package docs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestREADMEXeroHoldsFiveInFlightPerTenant runs the README's shared Xero client: 2 tenants × 10
// goroutines through one Xero value against a local upstream. Every request arrives with its tenant
// and token, and the profile's in-flight limit holds each tenant to 5 requests in progress at once.
func TestREADMEXeroHoldsFiveInFlightPerTenant(t *testing.T) {
	var mu sync.Mutex
	inFlight, peak, got := map[string]int{}, map[string]int{}, map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("Xero-Tenant-Id")
		if r.URL.Path != "/api.xro/2.0/Invoices" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		inFlight[tenant]++
		got[tenant]++
		peak[tenant] = max(peak[tenant], inFlight[tenant])
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // long enough for the ten to overlap
		mu.Lock()
		inFlight[tenant]--
		mu.Unlock()
		w.Write([]byte(`{"Invoices":[]}`))
	}))
	defer up.Close()
	defer func(old string) { xeroAPI = old }(xeroAPI)
	xeroAPI = up.URL

	x, err := NewXero("client-1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		for range 10 {
			wg.Go(func() {
				body, err := x.Invoices(ctx, tenant, "tok")
				if err == nil && string(body) != `{"Invoices":[]}` {
					t.Errorf("body %q", body)
				}
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		if got[tenant] != 10 || peak[tenant] > 5 || peak[tenant] < 1 {
			t.Errorf("%s: %d requests, at most %d in flight; want 10 and at most 5", tenant, got[tenant], peak[tenant])
		}
	}
}

// TestXeroRefusalNamesTenantAndStatus: a refused call is an error that names the tenant and the status.
func TestXeroRefusalNamesTenantAndStatus(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusUnauthorized)
	}))
	defer up.Close()
	defer func(old string) { xeroAPI = old }(xeroAPI)
	xeroAPI = up.URL
	x, err := NewXero("client-1")
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	_, err = x.Invoices(context.Background(), "tenant-a", "tok")
	if want := "xero: GET Invoices for tenant tenant-a: 401 Unauthorized"; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// TestSnippetsBuildTransports: the snippets that only configure a Transport are accepted by New
// (so no page shows options that New refuses).
func TestSnippetsBuildTransports(t *testing.T) {
	if err := shopifyCost(func(*http.Request) int { return 10 }); err != nil {
		t.Errorf("shopifyCost: %v", err)
	}
	if err := tokenBucketClient(); err != nil {
		t.Errorf("tokenBucketClient: %v", err)
	}
	if err := layered(); err != nil {
		t.Errorf("layered: %v", err)
	}
	if err := syncAndRetry(context.Background()); err != nil {
		t.Errorf("syncAndRetry: %v", err)
	}
	if err := learningClient(context.Background()); err != nil {
		t.Errorf("learningClient: %v", err)
	}
	if tr, err := learningGitHub(); err != nil {
		t.Errorf("learningGitHub: %v", err)
	} else {
		if err := learningSetMeter(tr); err != nil {
			t.Errorf("learningSetMeter: %v", err)
		}
		tr.Close()
	}
	for name, f := range map[string]func() (interface{ Close() error }, error){
		"newPacedXero":  func() (interface{ Close() error }, error) { tr, _, err := newPacedXero(); return tr, err },
		"newXeroClient": func() (interface{ Close() error }, error) { tr, _, err := newXeroClient(); return tr, err },
		"smoothing":     func() (interface{ Close() error }, error) { return smoothing() },
	} {
		tr, err := f()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := tr.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
	if !strings.HasPrefix(xeroAPI, "https://api.xero.com") {
		t.Errorf("xeroAPI = %q", xeroAPI)
	}
}

package retry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

const secretToken = "s3cr3tTOKEN42"

// TestNoCredentialInErrors: the errors a retrying client ends with — the monitor's wait past
// the deadline, the upstream's Retry-After past it, a connection error after the retries —
// show neither the bearer token (keys are hashed) nor the token given as a query parameter,
// and still wrap what they wrapped.
func TestNoCredentialInErrors(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/limited" {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer up.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // a connection error for every attempt
	tr := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 1, Window: time.Minute}), ratemonitor.WithPacing(),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)))
	c := NewClient(tr)
	c.RetryMax = 1
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, time.Millisecond
	defer c.HTTPClient.CloseIdleConnections()
	send := func(url string) error {
		// 30 s: what a request may take on a loaded machine; still before the Retry-After
		// (120 s) and the full key's wait (a minute) that must be refused as past it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, url+"?access_token="+secretToken+"&page=2", nil)
		req.Header.Set("Authorization", "Bearer "+secretToken)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("GET %s: no error", url)
		}
		if strings.Contains(err.Error(), secretToken) || !strings.Contains(err.Error(), "access_token=xxxxx&page=xxxxx") {
			t.Errorf("GET %s: %v: want the query's values redacted", url, err)
		}
		return err
	}
	// The upstream asks for 120 s, past the 30 s deadline.
	if err := send(up.URL + "/limited"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Retry-After past the deadline: %v, want DeadlineExceeded", err)
	}
	// The key is full for a minute: the Transport refuses at once.
	var de *ratemonitor.DeadlineError
	if err := send(up.URL + "/ok"); !errors.As(err, &de) || de.Key != ratemonitor.HashedKey(nil, "Bearer "+secretToken) {
		t.Errorf("monitor's wait past the deadline: %v, want a DeadlineError on the hashed key", err)
	}
	other := newTransport(t, ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Authorization", nil)))
	c.HTTPClient = &http.Client{Transport: other}
	err := send(gone.URL + "/x")
	if want := "GET " + gone.URL + "/x?access_token=xxxxx&page=xxxxx giving up after 2 attempt(s): "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("connection error: %v, want it to start %q", err, want)
	}
}

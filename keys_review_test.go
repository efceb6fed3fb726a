package ratemonitor

// The tests of this file come from the adversarial review (rev2) of issue 15: each comment
// describes the defect the reviewer found, as it was before its fix; the test asserts the
// fixed behaviour.

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestLogRedactsUserInfoCredential: Stripe documents its secret key as the Basic user name
// (curl -u sk_test_...:), and net/http sends a URL's user info as Basic credentials. The
// Transport's log line for a skewed Date (and every other line that names the request:
// syncFailed) passes the URL through credential.URL, which redacts only the password, so the
// secret key is logged.
func TestLogRedactsUserInfoCredential(t *testing.T) {
	const key = "sk_test_rev2SECRETkey"
	up := leakcheck.Upstream(t)
	w := &leakcheck.Watch{}
	clk := clock.NewManual(t0)
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 10, Window: time.Minute}), WithClock(clk),
		WithSync(SyncConfig{}), WithLogger(w.Logger()), WithObserver(w), WithErrorHandler(w.OnError))
	u := strings.Replace(up.URL, "http://", "http://"+key+":@", 1) + "/skewed"
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	logs := w.Logs()
	if !strings.Contains(logs, "upstream's Date") {
		t.Fatalf("no skewed-Date line logged:\n%s", logs)
	}
	if strings.Contains(logs, key) {
		t.Errorf("the log shows the Basic user name (Stripe's secret key):\n%s", logs)
	}
}

// TestCredentialHeaderNamesOfPublicAPIs: header names documented by popular APIs for their keys that
// IsCredentialHeader does not recognise, so KeyByHeader(name, nil) makes the raw key the
// rate-limit key (in Redis and SQLite keys, errors, logs, events): Azure Functions'
// x-functions-key (learn.microsoft.com, "Function access keys"), JFrog Artifactory's
// X-JFrog-Art-Api, Adafruit IO's X-AIO-Key, API-Sports' x-apisports-key.
func TestCredentialHeaderNamesOfPublicAPIs(t *testing.T) {
	const secret = "rev2-raw-api-key-value"
	for _, name := range []string{"x-functions-key", "X-JFrog-Art-Api", "X-AIO-Key", "x-apisports-key"} {
		req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
		req.Header.Set(name, secret)
		if k := KeyByHeader(name, nil)(req); strings.Contains(k, secret) {
			t.Errorf("KeyByHeader(%q) keys by the raw credential %q", name, k)
		}
	}
}

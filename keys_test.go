package ratemonitor

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
)

// TestEachRequestCountedUnderItsKey: a request is counted under the key WithKey put in its
// context (even ""), else the key function's (here a header, with a fallback when it is
// missing), never under the host as well; KeyByHost reads req.Host when the URL has none.
func TestEachRequestCountedUnderItsKey(t *testing.T) {
	tr := newTransport(t, &recorder{resp: &http.Response{}}, WithRules(minute), WithClock(clock.NewManual(t0)),
		WithKeyFunc(KeyByHeader("xero-tenant-id", func(*http.Request) string { return "no-tenant" })))
	send := func(ctx context.Context, tenant string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.xero.com/x", nil)
		if tenant != "" {
			req.Header.Set("Xero-Tenant-Id", tenant)
		}
		tr.RoundTrip(req)
	}
	send(context.Background(), "t1")
	send(context.Background(), "t1")
	send(context.Background(), "")
	send(WithKey(context.Background(), "per-request"), "t1")
	send(WithKey(context.Background(), ""), "t1")
	for key, want := range map[string]int{"t1": 2, "no-tenant": 1, "per-request": 1, "": 1, "api.xero.com": 0} {
		if got := usedOf(t, tr, key)[0]; got != want {
			t.Errorf("key %q: used %d, want %d", key, got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "/relative", nil)
	req.Host = "h.example"
	if got := KeyByHost(req); got != "h.example" {
		t.Errorf("KeyByHost without URL host = %q", got)
	}
}

// TestKeyByHeaderHashesCredentials: KeyByHeader hashes a credential header's value (HashedKey,
// with the default secret) and leaves other headers as they are; KeyByHashedHeader and HashKey
// hash with the fleet's secret, copied; a missing header falls back to the host, unhashed by
// KeyByHeader, hashed by HashKey.
func TestKeyByHeaderHashesCredentials(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	req.Header.Set("Authorization", leakcheck.Bearer)
	req.Header.Set("Xero-Tenant-Id", "tenant-1")
	if got := KeyByHeader("authorization", nil)(req); got != leakcheck.HashedBearer {
		t.Errorf("KeyByHeader(Authorization) = %q, want %q", got, leakcheck.HashedBearer)
	}
	if got := HashedKey(nil, leakcheck.Bearer); got != leakcheck.HashedBearer {
		t.Errorf("HashedKey = %q, want %q", got, leakcheck.HashedBearer)
	}
	if got := KeyByHeader("Xero-Tenant-Id", nil)(req); got != "tenant-1" {
		t.Errorf("KeyByHeader(Xero-Tenant-Id) = %q: a tenant id is no credential", got)
	}
	// With a secret of the fleet's own: printf %s tenant-1 | openssl dgst -sha256 -hmac fleet-secret.
	const fleet = "hmac:183c8653470463c5484d02477c7ea967"
	secret := []byte("fleet-secret")
	byTenant := KeyByHashedHeader("Xero-Tenant-Id", secret, nil)
	secret[0] = 'X' // the secret was copied
	if got := byTenant(req); got != fleet {
		t.Errorf("KeyByHashedHeader = %q, want %q", got, fleet)
	}
	if got := HashKey(KeyByHeader("Xero-Tenant-Id", nil), []byte("fleet-secret"))(req); got != fleet {
		t.Errorf("HashKey = %q, want %q", got, fleet)
	}
	// Fallbacks: KeyByHeader's is not hashed, HashKey hashes whatever it wraps.
	bare, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	if got := KeyByHeader("Authorization", nil)(bare); got != "api.test" {
		t.Errorf("no Authorization: %q, want the host", got)
	}
	if got := HashKey(nil, nil)(bare); got != HashedKey(nil, "api.test") || !strings.HasPrefix(got, hashedKeyPrefix) || len(got) != len(hashedKeyPrefix)+32 {
		t.Errorf("HashKey(nil, nil) = %q", got)
	}
}

// TestKeyByHeaderHashesPublicAPIsKeyHeaders: header names that popular APIs document for their
// keys are credential headers, so KeyByHeader(name, nil) hashes the key instead of making the
// raw key the rate-limit key (in Redis and SQLite keys, errors, logs, events): Azure Functions'
// x-functions-key (learn.microsoft.com, "Function access keys"), JFrog Artifactory's
// X-JFrog-Art-Api, Adafruit IO's X-AIO-Key, API-Sports' x-apisports-key.
func TestKeyByHeaderHashesPublicAPIsKeyHeaders(t *testing.T) {
	const secret = "raw-api-key-value"
	for _, name := range []string{"x-functions-key", "X-JFrog-Art-Api", "X-AIO-Key", "x-apisports-key"} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
			req.Header.Set(name, secret)
			if k := KeyByHeader(name, nil)(req); strings.Contains(k, secret) {
				t.Errorf("KeyByHeader(%q) keys by the raw credential %q", name, k)
			}
		})
	}
}

package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
	"github.com/ratemonitor/ratemonitor/strategy"
)

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
	if got := HashKey(nil, nil)(bare); got != HashedKey(nil, "api.test") || !strings.HasPrefix(got, HashedKeyPrefix) || len(got) != len(HashedKeyPrefix)+32 {
		t.Errorf("HashKey(nil, nil) = %q", got)
	}
}

// TestNoCredentialLeaks sends requests carrying a bearer token (and, in some URLs, the token as
// a query parameter) through every failure path a Transport has, over the memory store, and
// checks that the token appears in no error, log line or observer event. The stores' own cases
// are TestNoCredentialLeaksRedis (cache/redisstore/internal/transporttest) and
// TestTransportNoCredentialLeaksSQLite (cache/sqlitestore/internal/transporttest).
func TestNoCredentialLeaks(t *testing.T) {
	up := leakcheck.Upstream(t)
	ctx := context.Background()
	w := &leakcheck.Watch{}
	byAuth := WithKeyFunc(KeyByHeader("Authorization", nil))
	common := func(opts ...Option) []Option {
		return append([]Option{byAuth, WithLogger(w.Logger()), WithObserver(w), WithErrorHandler(w.OnError)}, opts...)
	}
	withToken := up.URL + "/skewed?access_token=" + leakcheck.Token

	t.Run("memory store closed", func(t *testing.T) {
		closed, _ := cache.NewMemory(cache.MemoryConfig{Observer: w})
		closed.Close()
		for _, p := range []StoreErrorPolicy{SendUncounted, SendNothing, Degrade} {
			tr := newTransport(t, nil, common(WithRules(minute), WithStore(closed), WithStoreErrorPolicy(p), WithSync(SyncConfig{}))...)
			paced := newTransport(t, nil, common(WithRules(minute), WithStore(closed), WithStoreErrorPolicy(p), WithPacing())...)
			leakcheck.Send(ctx, w, tr, withToken) // record fails; under SendUncounted the 429 then fails to sync
			leakcheck.Send(ctx, w, paced, withToken)
			_, err := paced.Reserve(ctx, paced.Key(authRequest(up.URL)), 1)
			w.Err(err)
		}
	})

	t.Run("memory store: deadline, burst, pause, skew", func(t *testing.T) {
		clk := clock.NewManual(t0)
		tr := newTransport(t, nil, common(WithRules(strategy.Rule{Limit: 1, Window: time.Minute}), WithPacing(), WithClock(clk),
			WithSync(SyncConfig{}))...)
		if err := leakcheck.Send(ctx, w, tr, withToken); err != nil { // granted; the 429 dated 1970 pauses the key and is logged
			t.Fatal(err)
		}
		dl, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var de *DeadlineError
		if err := leakcheck.Send(dl, w, tr, up.URL+"/ok?token="+leakcheck.Token); !errors.As(err, &de) || de.Key != leakcheck.HashedBearer {
			t.Errorf("past the deadline: %v, want a DeadlineError on %s", err, leakcheck.HashedBearer)
		}
		key := tr.Key(authRequest(up.URL))
		_, err := tr.Reserve(ctx, key, 2)
		w.Err(err)
		_, err = tr.WaitTime(ctx, key, 2)
		w.Err(err)
		w.Err(tr.Wait(dl, key, 1))
		st, err := tr.Status(ctx, key)
		w.Err(err)
		w.Add(fmt.Sprintf("%+v", st))
	})

	all := w.Check(t)
	// The paths above did reach the places they test.
	for _, want := range []string{"key=" + leakcheck.HashedBearer, "not sent", "past the context's deadline", "could not store what the upstream said",
		"the upstream's Date", "degraded", "skewed_date", "paused", "too_many_requests", "access_token=xxxxx", "store_error"} {
		if !strings.Contains(all, want) {
			t.Errorf("nothing logged or observed contains %q: a path was not reached", want)
		}
	}
}

func authRequest(url string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", leakcheck.Bearer)
	return req
}

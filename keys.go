package ratemonitor

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/ratemonitor/ratemonitor/internal/credential"
)

// KeyFunc returns the key a request is counted under. Every string is a valid key, the empty
// string included: no request is ever left uncounted because of its key.
type KeyFunc func(*http.Request) string

// KeyByHost keys a request by the host it is sent to, as in its URL ("api.xero.com",
// "127.0.0.1:8080"), falling back to req.Host when the URL has none.
func KeyByHost(req *http.Request) string {
	if req.URL != nil && req.URL.Host != "" {
		return req.URL.Host
	}
	return req.Host
}

// KeyByHeader keys a request by the value of header name, such as "Xero-Tenant-Id". A request
// without the header is keyed by fallback (nil means KeyByHost), so it is still counted.
//
// A header that holds a credential (IsCredentialHeader: Authorization, Cookie, X-Api-Key and
// the like) is never a key as it is: its value is hashed with DefaultKeySecret (into
// "hmac:…"), so KeyByHeader("Authorization", nil) counts a token under
// HashedKey(nil, "Bearer <token>") and the token appears in no store, error, log or event.
// KeyByHashedHeader hashes with a secret of the fleet's own.
func KeyByHeader(name string, fallback KeyFunc) KeyFunc {
	return keyByHeader(name, fallback, nil, credential.IsHeader(name))
}

// keyByHeader keys by header name, hashing its value with secret when hash is set.
func keyByHeader(name string, fallback KeyFunc, secret []byte, hash bool) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	if fallback == nil {
		fallback = KeyByHost
	}
	return func(req *http.Request) string {
		if v := req.Header[name]; len(v) > 0 && v[0] != "" {
			if hash {
				return credential.Hash(secret, v[0])
			}
			return v[0]
		}
		return fallback(req)
	}
}

type keyContext struct{}

// keysGiven is set by the first WithKey of the process: before it no context can carry a key
// (keyContext is this package's), and Transport.Key does not walk the request's context for one.
var keysGiven atomic.Bool

// WithKey returns a copy of ctx that makes a Transport count the request carrying it under key,
// whatever its KeyFunc says. key is used as it is: hash a credential first (HashedKey).
func WithKey(ctx context.Context, key string) context.Context {
	if !keysGiven.Load() { // read first: a store on every call would bounce the cache line
		keysGiven.Store(true)
	}
	return context.WithValue(ctx, keyContext{}, key)
}

// KeyFromContext returns the key set by WithKey, if any.
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyContext{}).(string)
	return k, ok
}

// Key returns the key t counts req under: the one set with WithKey on its context, or else
// the KeyFunc's.
func (t *Transport) Key(req *http.Request) string {
	if keysGiven.Load() { // else no WithKey yet: nothing to find in the context
		if k, ok := KeyFromContext(req.Context()); ok {
			return k
		}
	}
	if t.keyFunc == nil {
		return KeyByHost(req)
	}
	return t.keyFunc(req)
}

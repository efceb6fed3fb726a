package ratemonitor

import (
	"net/http"

	"github.com/ratemonitor/ratemonitor/internal/credential"
)

// Hashed keys keep credentials out of the places a key goes: store keys (Redis, SQLite,
// DynamoDB), errors (StoreError, DeadlineError), log lines and observe events. A hashed key
// is "hmac:" followed by the first 16 bytes (128 bits) of HMAC-SHA-256(secret, key)
// in lowercase hexadecimal ([0-9a-f], 32 digits), such as
// "hmac:43a38baf36ee2a499a83cfe4fb6e5a6b" for "Bearer ghp_example" under DefaultKeySecret. It
// depends only on the secret and the key, so every process that shares a store and the
// secret counts a credential under the same key.
//
// The default secret, DefaultKeySecret, is public. It keeps credentials out of logs and stores,
// but whoever reads a hashed key can still test guessed credentials against it (a dictionary
// attack), which matters for short or guessable ones. To stop that, give the whole fleet a
// secret of its own (32 random bytes, say, from its configuration) with KeyByHashedHeader or
// HashKey: processes with different secrets count the same credential under different keys.
const (
	hashedKeyPrefix  = credential.Prefix
	DefaultKeySecret = credential.DefaultSecret
)

// HashedKey returns key hashed with secret (empty or nil: DefaultKeySecret), as HashKey and
// KeyByHashedHeader do: the key to pass to AllocationUsed, Status, Reserve or WithKey for a
// credential, say HashedKey(nil, "Bearer "+token) for KeyByHeader("Authorization", nil).
func HashedKey(secret []byte, key string) string { return credential.Hash(secret, key) }

// HashKey returns a KeyFunc that counts a request under the hash of the key f gives it (every
// key, the empty one and fallbacks included), with secret (empty or nil: DefaultKeySecret; the
// secret is copied). nil f means KeyByHost. Keys already hashed are hashed again: the result
// is as stable, and a client cannot pick a key that passes for another's hash.
func HashKey(f KeyFunc, secret []byte) KeyFunc {
	if f == nil {
		f = KeyByHost
	}
	secret = append([]byte(nil), secret...)
	return func(req *http.Request) string { return credential.Hash(secret, f(req)) }
}

// KeyByHashedHeader is KeyByHeader with the header's value hashed with secret (empty or nil:
// DefaultKeySecret; the secret is copied), whatever the header. The fallback's keys (nil means
// KeyByHost) are not hashed: wrap the fallback in HashKey for that.
//
// An empty secret is not an error here (a KeyFunc has no error to return): it silently means
// the public DefaultKeySecret, as for HashKey. So check the fleet's secret where it is read,
// say len(secret) >= 16 for one taken from the environment, where an unset variable gives an
// empty one; the middleware's WithKeySecret refuses an empty secret for that reason.
func KeyByHashedHeader(name string, secret []byte, fallback KeyFunc) KeyFunc {
	return keyByHeader(name, fallback, append([]byte(nil), secret...), true)
}

// IsCredentialHeader reports whether KeyByHeader hashes the values of header name: when name,
// ignoring case, contains "auth", "token", "secret", "password", "passwd", "cookie",
// "session", "signature", "credential", "apikey", "api-key", "api_key", "subscription-key",
// "functions-key", "jfrog-art-api", "aio-key", "apisports-key", "access-key", "private-key"
// or "master-key". So Authorization, Proxy-Authorization, Cookie, X-Api-Key, Api-Key,
// X-Auth-Token, X-Access-Token, Private-Token, X-Shopify-Access-Token, X-Amz-Security-Token,
// X-Goog-Api-Key and Ocp-Apim-Subscription-Key do; Xero-Tenant-Id and X-Client-Id do not,
// nor does X-Client-Key (a name, not a secret, by this rule): hash such a header with
// KeyByHashedHeader.
func IsCredentialHeader(name string) bool { return credential.IsHeader(name) }

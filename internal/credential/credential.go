// Package credential keeps credentials out of rate-limit keys, errors and logs: it hashes keys
// with HMAC-SHA-256, tells credential header names from others, and redacts URLs for logs.
package credential

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
)

// Prefix starts every hashed key.
const Prefix = "hmac:"

// DefaultSecret is the HMAC key used when none is given. It is public: it keeps credentials
// out of logs and stores, but anyone can test a guessed credential against a hashed key.
const DefaultSecret = "github.com/ratemonitor/ratemonitor key hash v1 (public default)"

// SumBytes is how many bytes of the HMAC-SHA-256 a hashed key keeps (128 bits), written as
// 2·SumBytes lowercase hexadecimal digits.
const SumBytes = 16

// Hash returns Prefix followed by the first SumBytes of HMAC-SHA-256(secret, key) in lowercase
// hexadecimal ([0-9a-f]); an empty secret means DefaultSecret.
func Hash(secret []byte, key string) string {
	if len(secret) == 0 {
		secret = []byte(DefaultSecret)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key))
	var buf [sha256.Size]byte
	sum := m.Sum(buf[:0])
	return Prefix + hex.EncodeToString(sum[:SumBytes])
}

// words mark a header name as naming a credential wherever they appear in it. Not every name
// ending in "-key" does: X-Client-Key and Idempotency-Key name a client or a request, so the
// key headers of public API documentation that say neither "api" nor another word here are
// listed one by one: Azure Functions' x-functions-key
// (https://learn.microsoft.com/azure/azure-functions/function-keys-how-to), JFrog
// Artifactory's X-JFrog-Art-Api, Adafruit IO's X-AIO-Key, API-Sports' x-apisports-key, and
// the access-, private- and master-key headers (X-Master-Key of JSONBin, say).
var words = []string{"auth", "token", "secret", "password", "passwd", "cookie", "session",
	"signature", "credential", "apikey", "api-key", "api_key", "subscription-key",
	"functions-key", "jfrog-art-api", "aio-key", "apisports-key", "access-key", "private-key", "master-key"}

// IsHeader reports whether the header field name (any case) names a credential: it contains,
// ignoring case, one of "auth", "token", "secret", "password", "passwd", "cookie", "session",
// "signature", "credential", "apikey", "api-key", "api_key", "subscription-key",
// "functions-key", "jfrog-art-api", "aio-key", "apisports-key", "access-key", "private-key" or
// "master-key".
func IsHeader(name string) bool {
	n := strings.ToLower(name)
	for _, w := range words {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// URL returns u for a log line or an error with what may carry a credential replaced by
// "xxxxx": the whole user info (net/http sends it as Basic credentials, and APIs take a key
// as the user name: Stripe's secret key, "curl -u sk_test_...:",
// https://docs.stripe.com/api/authentication; a GitHub token as token@host), the value of
// every query parameter (access_token=, key=, a presigned URL's signature), and every query
// part without "=" (a bare ?<token>), and the whole fragment, replaced by "#xxxxx" (an OAuth
// implicit grant's redirect carries the token there: "#access_token=…", RFC 6749 §4.2.2;
// net/http never sends a fragment, but a req.URL parsed from such a URL keeps it). The path is
// kept: a token in it (Telegram's /bot<token>/) still shows.
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.Fragment != "" || c.RawFragment != "" {
		c.Fragment, c.RawFragment = "xxxxx", ""
	}
	if c.User != nil {
		c.User = url.User("xxxxx")
	}
	if c.RawQuery != "" {
		parts := strings.Split(c.RawQuery, "&")
		for i, p := range parts {
			if name, _, ok := strings.Cut(p, "="); ok {
				parts[i] = name + "=xxxxx"
			} else if p != "" {
				parts[i] = "xxxxx"
			}
		}
		c.RawQuery = strings.Join(parts, "&")
	}
	return c.String()
}

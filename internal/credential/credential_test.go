package credential

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"testing"
)

// TestHashIsTheDocumentedHMAC: Hash is "hmac:" and the first 16 bytes of HMAC-SHA256 of the
// value under the secret, in hex; an empty secret is DefaultSecret; a fixed value pins it.
func TestHashIsTheDocumentedHMAC(t *testing.T) {
	// Computed independently: the documented construction, by hand.
	m := hmac.New(sha256.New, []byte("s3cret"))
	m.Write([]byte("Bearer abc"))
	want := "hmac:" + hex.EncodeToString(m.Sum(nil)[:16])
	if got := Hash([]byte("s3cret"), "Bearer abc"); got != want || len(got) != len("hmac:")+32 {
		t.Errorf("Hash = %q, want %q", got, want)
	}
	if Hash(nil, "x") != Hash([]byte(DefaultSecret), "x") || Hash(nil, "x") == Hash([]byte("other"), "x") {
		t.Error("an empty secret must mean DefaultSecret, and another secret another hash")
	}
	// A fixed value: a change of the construction changes every key in every store.
	if got := Hash(nil, "Bearer ghp_example"); got != golden {
		t.Errorf("Hash(default, %q) = %q, want %q", "Bearer ghp_example", got, golden)
	}
}

// golden is the first 32 hex digits of `printf %s "Bearer ghp_example" | openssl dgst -sha256 -hmac "<DefaultSecret>"`.
const golden = "hmac:43a38baf36ee2a499a83cfe4fb6e5a6b"

// TestIsHeaderKnowsCredentialHeaders: the headers APIs carry keys, tokens, cookies, sessions
// and signatures in are credential headers, whatever their case; tenant ids, hosts, agents,
// idempotency keys and other plain headers are not.
func TestIsHeaderKnowsCredentialHeaders(t *testing.T) {
	for _, name := range []string{"Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "Api-Key", "apikey",
		"X-Auth-Token", "X-Access-Token", "Private-Token", "X-Shopify-Access-Token", "X-Amz-Security-Token",
		"X-Goog-Api-Key", "Ocp-Apim-Subscription-Key", "X-Session-Id", "X-Hub-Signature-256",
		"X-Client-Secret", "X-Password", "Api_Key", "x-functions-key", "X-JFrog-Art-Api", "X-AIO-Key", "x-apisports-key",
		"X-Master-Key", "X-Access-Key", "X-Private-Key"} {
		t.Run(name, func(t *testing.T) {
			if !IsHeader(name) {
				t.Errorf("IsHeader(%q) = false", name)
			}
		})
	}
	for _, name := range []string{"Xero-Tenant-Id", "X-Tenant", "Host", "User-Agent", "Shopify-Shop", "X-Keyboard", "Accept", "X-Client-Key", "Idempotency-Key", "X-Client-Id"} {
		t.Run(name, func(t *testing.T) {
			if IsHeader(name) {
				t.Errorf("IsHeader(%q) = true", name)
			}
		})
	}
}

// TestURLRedactsCredentials: URL replaces every credential a URL can carry with xxxxx: the
// user info (Stripe's secret key is the Basic user name, a GitHub token the whole of it), every
// query value and bare query word, and the whole fragment, raw (escaped) form too (an OAuth
// implicit-grant redirect carries its token there, RFC 6749 §4.2.2: "#access_token=…"; net/http
// does not send it, but URL prints it); a URL without any is left as it was, and a nil URL is "".
func TestURLRedactsCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"https://api.example.com/v1/x":                                            "https://api.example.com/v1/x",
		"https://u:pw@api.example.com/v1/x?access_token=tok&page=2&flag":          "https://xxxxx@api.example.com/v1/x?access_token=xxxxx&page=xxxxx&xxxxx",
		"https://sk_test_abc:@api.stripe.com/v1/charges":                          "https://xxxxx@api.stripe.com/v1/charges",
		"https://ghp_tok@api.github.com/user":                                     "https://xxxxx@api.github.com/user",
		"https://hooks.example.com/in?sigABC&&a=":                                 "https://hooks.example.com/in?xxxxx&&a=xxxxx",
		"http://h/p?key=AIza&key=AIzb":                                            "http://h/p?key=xxxxx&key=xxxxx",
		"https://app.example/callback#access_token=SECRETTOKEN&token_type=bearer": "https://app.example/callback#xxxxx",
		"https://app.example/cb#access_token=SECRET%2FTOKEN":                      "https://app.example/cb#xxxxx",
		"https://app.example/cb?a=b#t":                                            "https://app.example/cb?a=xxxxx#xxxxx",
		"https://app.example/cb":                                                  "https://app.example/cb",
	} {
		t.Run(in, func(t *testing.T) {
			u, err := url.Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := URL(u); got != want {
				t.Errorf("URL(%s) = %q, want %q", in, got, want)
			}
		})
	}
	if URL(nil) != "" {
		t.Error("URL(nil) must be empty")
	}
}

package middleware

import (
	"net/http"
	"slices"

	"github.com/ratemonitor/ratemonitor/observe"
)

// OutagePolicy says what the middleware does with a request when the store fails.
type OutagePolicy int

const (
	// Reject answers 503 Service Unavailable (with Retry-After: 1 and a problem details
	// body) and does not call the wrapped handler. It is the zero value and the default: a
	// limit that protects a server does not vanish silently while its store is down.
	Reject OutagePolicy = iota
	// Admit passes the request to the wrapped handler, uncounted and without RateLimit
	// fields: the server stays available while its store is down.
	Admit
)

// KeyFunc returns the key a request is counted under. An error, or an empty key, is answered
// 500 Internal Server Error (see the package comment).
type KeyFunc func(r *http.Request) (string, error)

// Option configures a Limiter; New reports invalid options.
type Option func(*config)

type config struct {
	keyFunc       KeyFunc
	keyHeader     string
	keyHeaderSet  bool
	keySecret     []byte
	keySecretSet  bool
	ipv6Bits      int
	proxyHeader   string
	proxyRanges   []string
	policy        OutagePolicy
	onError       func(*http.Request, error)
	names         []string
	problemType   string
	instance      func(*http.Request) string
	ipv6BitsSet   bool
	trustedCalled bool
	observer      observe.Observer
}

// WithKeyFunc makes f the only source of keys: WithKeyHeader, WithIPv6Prefix and
// WithTrustedProxies cannot be combined with it (New says so).
func WithKeyFunc(f KeyFunc) Option { return func(c *config) { c.keyFunc = f } }

// WithKeyHeader counts a request under the value of header name (such as "X-Client-Key" or an
// API-key header) when it is present and not empty, and under its client's address otherwise.
// Header keys and address keys never collide: they are kept under different prefixes
// ("key:" and "ip:").
//
// The header's value is taken as the client sends it: unless something in front of the
// handler authenticates it, a client can change its key by changing the header.
//
// A header that holds a credential (Authorization, Cookie, X-Api-Key and the like:
// ratemonitor.IsCredentialHeader says which) is never a key as it is: the key is "key:"
// followed by the value's hash (ratemonitor.HashedKey, with ratemonitor.DefaultKeySecret or
// WithKeySecret's secret), so the credential appears in no store, error, log, event or
// Admission. Other headers' values are used as they are, unless WithKeySecret is given.
func WithKeyHeader(name string) Option {
	return func(c *config) { c.keyHeader, c.keyHeaderSet = name, true }
}

// WithKeySecret makes WithKeyHeader hash the header's value with secret, whatever the header
// (see ratemonitor.HashedKey): a secret shared by the servers that share the store stops a
// dictionary attack on hashed keys, which the public default secret does not. New fails when
// secret is empty (a secret meant to come from configuration that is missing) or WithKeyHeader
// is not given; a KeyFunc hashes its keys itself (ratemonitor.HashedKey).
func WithKeySecret(secret []byte) Option {
	return func(c *config) { c.keySecret, c.keySecretSet = append([]byte(nil), secret...), true }
}

// WithIPv6Prefix counts IPv6 clients by the first bits bits of their address (1 to 128). The
// default is 64: a single host usually holds a whole /64 (RFC 6177's end-site assignments are
// /48 to /64) and can rotate through it, so keying each address would let it multiply its
// allocation and flood the store with keys. WithIPv6Prefix(128) keys each address. IPv4
// addresses, IPv4-mapped IPv6 addresses and addresses of the well-known NAT64 prefix
// 64:ff9b::/96 (RFC 6052) are always keyed by their IPv4 address.
func WithIPv6Prefix(bits int) Option {
	return func(c *config) { c.ipv6Bits, c.ipv6BitsSet = bits, true }
}

// WithTrustedProxies lets header ("X-Forwarded-For" or "Forwarded") name the client when the
// request comes from a trusted proxy: a peer whose address is in one of ranges (CIDR prefixes
// such as "10.0.0.0/8" or single addresses). The client's address is then the rightmost
// address in header that is not in ranges (github.com/realclientip/realclientip-go's
// RightmostTrustedRangeStrategy); when the field names none (absent, or all trusted), the
// peer's own address is used. Only the one field is read: a client cannot pass its own value
// through a proxy that writes the other. ranges must list every proxy that appends to the
// field.
func WithTrustedProxies(header string, ranges ...string) Option {
	// Copied now: the option is a value, unchanged by what the caller later does to ranges.
	ranges = slices.Clone(ranges)
	return func(c *config) {
		c.trustedCalled = true
		c.proxyHeader = header
		c.proxyRanges = slices.Clone(ranges)
	}
}

// WithOutagePolicy sets what happens when the store fails (default Reject).
func WithOutagePolicy(p OutagePolicy) Option {
	return func(c *config) { c.policy = p }
}

// WithErrorHandler makes f receive every store error and every key error, with the request
// it happened to, before the response is written (under either OutagePolicy). f runs on the
// request's goroutine: keep it short.
func WithErrorHandler(f func(r *http.Request, err error)) Option {
	return func(c *config) { c.onError = f }
}

// WithPolicyNames names the strategy's rules in the RateLimit-Policy and RateLimit fields,
// one name per rule in rule order. Names must be distinct and not empty. By default a rule
// is named after its effective limit and window, "<limit>-per-<window>" ("60-per-60s",
// "10-per-500ms"), with "-2", "-3", … added to tell equal names apart.
func WithPolicyNames(names ...string) Option {
	names = slices.Clone(names) // the option is a value: the caller may reuse the slice
	return func(c *config) { c.names = slices.Clone(names) }
}

// WithProblemType sets the type URI of the 429 problem details (RFC 9457 §3.1.1; default
// "about:blank", whose title is the status phrase, "Too Many Requests").
func WithProblemType(uri string) Option { return func(c *config) { c.problemType = uri } }

// WithInstance sets how the instance member of problem details is derived from the request
// (RFC 9457 §3.1.5; default the request's URL path, escaped).
func WithInstance(f func(r *http.Request) string) Option {
	return func(c *config) { c.instance = f }
}

// WithObserver makes o receive an Admitted or a Rejected event for each request the store
// decided (package observe), with the key, the Retry-After of a refusal (Event.Wait) and
// every rule's usage after the decision (Event.Rules, rules named as strategy.Rule.String
// gives them, such as "60/1m0s"). Store errors are the store's events: give o to the store
// too. Requests whose key cannot be found, or whose client has gone, are not decided and not
// reported. nil, the default, reports nothing and costs nothing.
func WithObserver(o observe.Observer) Option {
	return func(c *config) { c.observer = o }
}

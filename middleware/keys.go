package middleware

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/realclientip/realclientip-go"

	"github.com/ratemonitor/ratemonitor/internal/credential"
)

// ErrNoKey is wrapped by the error passed to the error handler when a request's key cannot be
// found.
var ErrNoKey = errors.New("ratemonitor: middleware: no rate-limit key for the request")

// Key prefixes keep keys from different sources apart.
const (
	prefixIP  = "ip:"
	prefixKey = "key:"
)

// keyer derives keys as configured.
type keyer struct {
	custom   KeyFunc
	header   string // canonical; "" when unset
	hash     bool   // hash header values with secret (credential.Hash)
	secret   []byte
	ipv6Bits int
	trusted  []net.IPNet
	proxies  realclientip.Strategy // nil when no proxy is trusted
}

func newKeyer(c *config) (*keyer, error) {
	k := &keyer{custom: c.keyFunc, ipv6Bits: 64}
	if c.keyHeaderSet && !isToken(c.keyHeader) {
		return nil, fmt.Errorf("ratemonitor: middleware: WithKeyHeader(%q): not a header field name", c.keyHeader)
	}
	if c.keyFunc != nil && (c.keyHeaderSet || c.ipv6BitsSet || c.trustedCalled || c.keySecretSet) {
		return nil, errors.New("ratemonitor: middleware: WithKeyFunc cannot be combined with WithKeyHeader, WithKeySecret, WithIPv6Prefix or WithTrustedProxies (hash its keys in the KeyFunc: ratemonitor.HashedKey)")
	}
	if c.keySecretSet && len(c.keySecret) == 0 {
		return nil, errors.New("ratemonitor: middleware: WithKeySecret: the secret is empty; give the fleet's secret, or omit WithKeySecret to hash credential headers with the public default")
	}
	if c.keySecretSet && !c.keyHeaderSet {
		return nil, errors.New("ratemonitor: middleware: WithKeySecret needs WithKeyHeader: it hashes that header's values")
	}
	if c.keyHeader != "" {
		k.header = http.CanonicalHeaderKey(c.keyHeader)
		k.hash, k.secret = c.keySecretSet || credential.IsHeader(c.keyHeader), c.keySecret
	}
	if c.ipv6BitsSet {
		if c.ipv6Bits < 1 || c.ipv6Bits > 128 {
			return nil, fmt.Errorf("ratemonitor: middleware: IPv6 prefix length %d, want 1 to 128", c.ipv6Bits)
		}
		k.ipv6Bits = c.ipv6Bits
	}
	if c.trustedCalled {
		if len(c.proxyRanges) == 0 {
			return nil, errors.New("ratemonitor: middleware: WithTrustedProxies needs at least one address or range")
		}
		nets, err := realclientip.AddressesAndRangesToIPNets(c.proxyRanges...)
		if err != nil {
			return nil, fmt.Errorf("ratemonitor: middleware: trusted proxies: %w", err)
		}
		s, err := realclientip.NewRightmostTrustedRangeStrategy(c.proxyHeader, nets)
		if err != nil {
			return nil, fmt.Errorf("ratemonitor: middleware: trusted proxies: %w", err)
		}
		k.trusted, k.proxies = nets, s
	}
	return k, nil
}

// key returns the key r is counted under, or an error wrapping ErrNoKey.
func (k *keyer) key(r *http.Request) (string, error) {
	if k.custom != nil {
		key, err := k.custom(r)
		switch {
		case err != nil:
			return "", fmt.Errorf("%w: key func: %w", ErrNoKey, err)
		case key == "":
			return "", fmt.Errorf("%w: key func returned an empty key", ErrNoKey)
		}
		return key, nil
	}
	if k.header != "" {
		if v := r.Header.Get(k.header); v != "" {
			if k.hash {
				return prefixKey + credential.Hash(k.secret, v), nil
			}
			return prefixKey + v, nil
		}
	}
	ip, err := k.clientIP(r)
	if err != nil {
		return "", err
	}
	return prefixIP + k.group(ip), nil
}

// clientIP returns the peer's address, or with trusted proxies the client's address that the
// proxies recorded.
func (k *keyer) clientIP(r *http.Request) (netip.Addr, error) {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: the peer address %q is not an IP address", ErrNoKey, r.RemoteAddr)
	}
	if k.proxies == nil || !k.isTrusted(peer) {
		return peer, nil
	}
	if ip, ok := parseAddr(k.proxies.ClientIP(r.Header, r.RemoteAddr)); ok {
		return ip, nil
	}
	return peer, nil
}

func (k *keyer) isTrusted(ip netip.Addr) bool {
	nip := net.IP(ip.AsSlice())
	for _, n := range k.trusted {
		if n.Contains(nip) {
			return true
		}
	}
	return false
}

// nat64 is the well-known NAT64 prefix (RFC 6052): IPv4 clients behind a NAT64 reach the
// server as 64:ff9b::<their IPv4 address>.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// group returns ip's key text: IPv6 addresses cut to the configured prefix, and addresses of the
// well-known NAT64 prefix keyed by the IPv4 address they carry, as each is a client of its own.
// (A network-specific NAT64 prefix needs WithKeyFunc.)
func (k *keyer) group(ip netip.Addr) string {
	if nat64.Contains(ip) {
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[12:])).String()
	}
	if ip.Is4() || k.ipv6Bits == 128 {
		return ip.String()
	}
	p, _ := ip.Prefix(k.ipv6Bits) // bits is within 1..128, ip is IPv6: no error
	return p.String()
}

// parseAddr reads "ip", "ip:port", "[ipv6]:port" or "ipv6%zone", dropping the zone and
// unmapping IPv4-mapped IPv6 addresses.
func parseAddr(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.WithZone("").Unmap(), true
}

// isToken reports whether s is an RFC 9110 token (§5.6.2), as a field name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

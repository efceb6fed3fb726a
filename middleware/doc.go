// Package middleware is net/http server middleware that limits the requests a server accepts,
// per key, with a ratemonitor strategy (fixed window, token bucket or rolling window) kept in
// a store that implements cache.Admitter (the memory store, the SQLite store, the Redis store).
// The wrapped handler finds the key and decision with FromContext.
//
// Each request is one attempt (n = 1) under every rule of the strategy, decided in one atomic
// store call on the request's context. An admitted request goes to the wrapped handler; a
// refused one gets:
//
//   - status 429 Too Many Requests;
//   - Retry-After (RFC 9110 §10.2.3) in whole seconds, the decision's wait rounded up, so a
//     client that waits that long is never early;
//   - a problem details body (RFC 9457), Content-Type application/problem+json, with type,
//     title, status, detail (which rule refused, and when to retry) and instance.
//
// Every decided response, admitted or refused, carries the RateLimit-Policy and RateLimit
// fields of draft-ietf-httpapi-ratelimit-headers: RFC 9651 structured-field lists with one
// member per rule, in rule order, e.g.
//
//	RateLimit-Policy: "3-per-10s";q=3;w=10
//	RateLimit: "3-per-10s";r=0;t=9
//
// which headers.ParseIETF reads back. q is the rule's effective limit and w its effective
// window in seconds, rounded up; r is what remains and t the seconds until the whole limit is
// available again, rounded up. Under the token bucket q is the capacity and w the time to
// refill from empty, so a client that finds the bucket full can send up to 2·q in the first w.
//
// # Keys
//
// By default a request is counted under its peer's IP address (Request.RemoteAddr without the
// port), an IPv6 address by its /64 network (see WithIPv6Prefix). X-Forwarded-For and Forwarded
// are never read unless WithTrustedProxies names the proxies' ranges, and then only when the
// peer is one of them: the key is the rightmost address of the chosen field that is not a
// trusted proxy, so entries a client writes to the left of its own address change nothing.
// WithKeyHeader counts requests by a header's value (falling back to the address), and
// WithKeyFunc replaces key derivation entirely.
//
// A request whose key cannot be found (no IP address in RemoteAddr, as over a Unix socket, or
// a KeyFunc error) is answered 500 Internal Server Error with a problem details body: the
// client cannot fix it, so it is not a 400. The error is passed to the error handler.
//
// # Store failures
//
// When the store fails, Reject (the default) answers 503 Service Unavailable with
// Retry-After: 1 and a problem details body; Admit passes the request to the wrapped
// handler without RateLimit fields. Either way the error handler (WithErrorHandler) is called.
//
// Contention is not a store failure: when the store lost an optimistic race on the key
// (cache.ErrContended, from the DynamoDB store), nothing was counted, and the decision is
// tried again, with jittered backoff, until it is made or the request's context ends. In that
// last case the answer is 503 with Retry-After: 1 under either policy, the error handler is
// called, and the wrapped handler never runs uncounted.
package middleware

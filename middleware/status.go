package middleware

import (
	"context"
	"net/http"

	"github.com/ratemonitor/ratemonitor/internal/credential"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// Admission is what the Limiter decided for an admitted request: the key it was counted under
// and the decision, with every rule's state after it.
type Admission struct {
	Key      string
	Decision strategy.Decision
}

type admissionKey struct{}

// FromContext returns the Admission of the request whose context ctx is, inside a handler a
// Limiter wraps; false when the Limiter did not decide it (Admit after a store error, or
// a handler not wrapped).
func FromContext(ctx context.Context) (Admission, bool) {
	a, ok := ctx.Value(admissionKey{}).(Admission)
	return a, ok
}

// Key returns the key r is counted under, as Wrap derives it (see the package comment). The
// error wraps ErrNoKey when there is none.
func (l *Limiter) Key(r *http.Request) (string, error) { return l.keys.key(r) }

// HeaderKey returns the key a request is counted under by l when its key header
// (WithKeyHeader) has the value v: "key:" + v, or "key:" + the hash of v when l hashes the
// header's values (a credential header, or WithKeySecret). Keys from addresses start with "ip:",
// so a header value can never take an address's allocation.
func (l *Limiter) HeaderKey(v string) string {
	if l.keys.hash {
		return prefixKey + credential.Hash(l.keys.secret, v)
	}
	return prefixKey + v
}

// Status returns key's usage per rule, in rule order, and in Snapshot.Wait how long until one
// more request would be admitted, without counting anything: the store's Peek. Errors are the
// store's.
func (l *Limiter) Status(ctx context.Context, key string) (strategy.Snapshot, error) {
	return l.peek.Peek(ctx, l.strat, key, 1)
}

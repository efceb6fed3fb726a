package ratemonitor

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// contentionFixture is a DynamoDB store whose first fail conditional writes (UpdateItem) are
// answered "condition failed", as when other writers keep coming first (fail < 0: all of
// them), with the store's own retries off, and an upstream that counts arrivals.
type contentionFixture struct {
	store         *dynamostore.Store
	fail, updates atomic.Int64 // UpdateItem calls to fail, and made (failed or not)
	arrived       atomic.Int64
	url           string
}

func newContentionFixture(t *testing.T, fail int64) *contentionFixture {
	f := &contentionFixture{}
	f.fail.Store(fail)
	f.store = faultyDynamoStore(t, dynamostore.Options{MaxRetries: -1}, func(op string) *http.Response {
		if op != "UpdateItem" {
			return nil
		}
		if n, fail := f.updates.Add(1), f.fail.Load(); fail < 0 || n <= fail {
			return conditionFailed()
		}
		return nil
	})
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { f.arrived.Add(1) }))
	t.Cleanup(up.Close)
	f.url = up.URL
	return f
}

// transport returns a Transport on the fixture's store, FailOpen unless opts say otherwise
// (by name: paced Transports default to Degrade), whose store errors are counted in reported.
func (f *contentionFixture) transport(t *testing.T, key string, reported *atomic.Int64, opts ...Option) *Transport {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	opts = append([]Option{WithRules(strategy.Rule{Limit: 10, Window: time.Minute}), WithStore(f.store),
		WithKeyFunc(func(*http.Request) string { return key }), WithLogger(slog.New(slog.DiscardHandler)),
		WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }), WithErrorPolicy(FailOpen)}, opts...)
	return newTransport(t, base, opts...)
}

// TestContentionPastDeadline: when every conditional write on the key loses (the store returns
// dynamostore.ErrContended each time), a request under the default FailOpen is retried until
// its context's deadline and then not sent: RoundTrip returns an error wrapping both
// context.DeadlineExceeded and cache.ErrContended, the error handler is not called (contention
// is not an outage), the upstream sees nothing and the key counts nothing. So for paced and
// monitored requests, and for Reserve. Before the fix the request was sent uncounted at once.
func TestContentionPastDeadline(t *testing.T) {
	f := newContentionFixture(t, -1)
	const timeout = 100 * time.Millisecond
	for _, mode := range []string{"pacing", "monitoring", "Reserve"} {
		t.Run(mode, func(t *testing.T) {
			var reported atomic.Int64
			var opts []Option
			if mode == "pacing" {
				opts = append(opts, WithPacing())
			}
			tr := f.transport(t, "k", &reported, opts...)
			before := f.updates.Load()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			deadline, _ := ctx.Deadline()
			var err error
			if mode == "Reserve" {
				_, err = tr.Reserve(ctx, "k", 1)
			} else {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
				var resp *http.Response
				if resp, err = tr.RoundTrip(req); resp != nil {
					resp.Body.Close()
				}
			}
			early := time.Until(deadline)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cache.ErrContended) || !errors.Is(err, dynamostore.ErrContended) {
				t.Errorf("err = %v, want one wrapping context.DeadlineExceeded and cache.ErrContended", err)
			}
			var se *StoreError
			if errors.As(err, &se) {
				t.Errorf("err = %v is a *StoreError: contention is not a store failure", err)
			}
			if n := f.arrived.Load(); n != 0 {
				t.Errorf("the upstream got %d requests, want 0", n)
			}
			if n := reported.Load(); n != 0 {
				t.Errorf("%d store errors reported, want 0", n)
			}
			if early > 0 {
				t.Errorf("gave up %v before the deadline", early)
			}
			if n := f.updates.Load() - before; n < 2 {
				t.Errorf("%d conditional writes tried, want the first and retries", n)
			}
			if used := usedOf(t, tr, "k"); used[0] != 0 {
				t.Errorf("used = %d, want 0", used[0])
			}
		})
	}
}

// TestContentionRetried: when the first 5 conditional writes on the key lose, a request is
// retried by the Transport until the sixth lands, then sent once and counted once, with no store
// error reported; in both modes, and for Reserve (one slot held).
func TestContentionRetried(t *testing.T) {
	f := newContentionFixture(t, 5)
	for _, mode := range []string{"pacing", "monitoring", "Reserve"} {
		t.Run(mode, func(t *testing.T) {
			f.updates.Store(0)
			f.arrived.Store(0)
			var reported atomic.Int64
			var opts []Option
			if mode == "pacing" {
				opts = append(opts, WithPacing())
			}
			tr := f.transport(t, mode, &reported, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if mode == "Reserve" {
				var r *Reservation
				if r, err = tr.Reserve(ctx, mode, 1); err == nil && r.Remaining() != 1 {
					t.Errorf("Remaining = %d, want 1", r.Remaining())
				}
			} else {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
				var resp *http.Response
				if resp, err = tr.RoundTrip(req); resp != nil {
					resp.Body.Close()
				}
			}
			wantSent := int64(1)
			if mode == "Reserve" {
				wantSent = 0
			}
			if err != nil || f.arrived.Load() != wantSent || reported.Load() != 0 || f.updates.Load() != 6 {
				t.Errorf("err %v, %d sent, %d store errors reported, %d conditional writes; want nil, %d, 0, 6",
					err, f.arrived.Load(), reported.Load(), f.updates.Load(), wantSent)
			}
			if used := usedOf(t, tr, mode); used[0] != 1 {
				t.Errorf("used = %d, want 1", used[0])
			}
		})
	}
}

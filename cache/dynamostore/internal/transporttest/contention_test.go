package transporttest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestMonitoredContentionCountsEveryRequestDynamo: 64 goroutines × 4 requests on one key in
// monitoring mode (default SendUncounted) through one Transport, and through four sharing the
// table, over a DynamoDB store whose own retries are off, so that racing writers would meet
// contention at once: every one of the 256 requests that reached the upstream is counted (the key
// counts 256), and no store error is reported.
func TestMonitoredContentionCountsEveryRequestDynamo(t *testing.T) {
	st := dynamoStore(t, dynamostore.Options{MaxRetries: -1})
	rule := strategy.Rule{Limit: 1000, Window: time.Hour, Granularity: time.Minute}
	for _, transports := range []int{1, 4} {
		t.Run(strconv.Itoa(transports), func(t *testing.T) {
			var arrived atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { arrived.Add(1) }))
			defer up.Close()
			base := &http.Transport{MaxIdleConnsPerHost: 64}
			defer base.CloseIdleConnections()
			var reported atomic.Int64
			trs := make([]*ratemonitor.Transport, transports)
			for i := range trs {
				trs[i] = newTransport(t, base, ratemonitor.WithRules(rule), ratemonitor.WithStore(st), ratemonitor.WithLogger(slog.New(slog.DiscardHandler)),
					ratemonitor.WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }))
			}
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Go(func() {
					for range 4 {
						req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
						resp, err := trs[i%transports].RoundTrip(req)
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			used := usedOf(t, trs[0], strings.TrimPrefix(up.URL, "http://"))
			if arrived.Load() != 256 || used[0] != 256 || reported.Load() != 0 {
				t.Errorf("%d arrived, the key counts %d, %d store errors reported; want 256, 256, 0", arrived.Load(), used[0], reported.Load())
			}
			t.Logf("store: %+v", st.Stats())
		})
	}
}

// contentionFixture is a DynamoDB store whose first fail conditional writes (UpdateItem) are
// answered "condition failed", as when other writers keep coming first (fail < 0: all of
// them), with the store's own retries off, and an upstream that counts arrivals. The write
// numbered hold (counted as updates is), when set, is answered only once its request's context
// has ended: a test can thus have the deadline pass during a retry, however slow the machine.
type contentionFixture struct {
	store         *dynamostore.Store
	fail, updates atomic.Int64 // UpdateItem calls to fail, and made (failed or not)
	hold          atomic.Int64
	arrived       atomic.Int64
	url           string
}

func newContentionFixture(t *testing.T, fail int64) *contentionFixture {
	f := &contentionFixture{}
	f.fail.Store(fail)
	f.store = faultyDynamoStore(t, dynamostore.Options{MaxRetries: -1}, func(r *http.Request, op string) *http.Response {
		if op != "UpdateItem" {
			return nil
		}
		n, fail := f.updates.Add(1), f.fail.Load()
		if n == f.hold.Load() {
			<-r.Context().Done()
		}
		if fail < 0 || n <= fail {
			return conditionFailed()
		}
		return nil
	})
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { f.arrived.Add(1) }))
	t.Cleanup(up.Close)
	f.url = up.URL
	return f
}

// transport returns a Transport on the fixture's store, SendUncounted unless opts say otherwise
// (by name: paced Transports default to Degrade), whose store errors are counted in reported.
func (f *contentionFixture) transport(t *testing.T, key string, reported *atomic.Int64, opts ...ratemonitor.Option) *ratemonitor.Transport {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	opts = append([]ratemonitor.Option{ratemonitor.WithRules(strategy.Rule{Limit: 10, Window: time.Minute}), ratemonitor.WithStore(f.store),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return key }), ratemonitor.WithLogger(slog.New(slog.DiscardHandler)),
		ratemonitor.WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }), ratemonitor.WithStoreErrorPolicy(ratemonitor.SendUncounted)}, opts...)
	return newTransport(t, base, opts...)
}

// TestContentionUntilDeadlineSendsNothing: when every conditional write on the key loses (the store
// returns dynamostore.ErrContended each time), a request under the default SendUncounted is retried
// until its context's deadline and then not sent: RoundTrip returns an error wrapping both
// context.DeadlineExceeded and cache.ErrContended, the error handler is not called (contention is
// not an outage), the upstream sees nothing and the key counts nothing. So for paced and monitored
// requests, and for Reserve. Before the fix the request was sent uncounted at once. The second
// conditional write (the first retry) is held until the deadline has passed, so that the retry is
// seen however slow the machine; the deadline, 2 s, leaves the first try's read (a few milliseconds
// idle) hundreds of times its time.
func TestContentionUntilDeadlineSendsNothing(t *testing.T) {
	f := newContentionFixture(t, -1)
	const timeout = 2 * time.Second
	for _, mode := range []string{"pacing", "monitoring", "Reserve"} {
		t.Run(mode, func(t *testing.T) {
			var reported atomic.Int64
			var opts []ratemonitor.Option
			if mode == "pacing" {
				opts = append(opts, ratemonitor.WithPacing())
			}
			tr := f.transport(t, "k", &reported, opts...)
			before := f.updates.Load()
			f.hold.Store(before + 2)
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
			var se *ratemonitor.StoreError
			if errors.As(err, &se) {
				t.Errorf("err = %v is a *ratemonitor.StoreError: contention is not a store failure", err)
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

// TestContentionRetriedThenSentOnce: when the first 5 conditional writes on the key lose, a request
// is retried by the Transport until the sixth lands, then sent once and counted once, with no store
// error reported; in both modes, and for Reserve (one slot held).
func TestContentionRetriedThenSentOnce(t *testing.T) {
	f := newContentionFixture(t, 5)
	for _, mode := range []string{"pacing", "monitoring", "Reserve"} {
		t.Run(mode, func(t *testing.T) {
			f.updates.Store(0)
			f.arrived.Store(0)
			var reported atomic.Int64
			var opts []ratemonitor.Option
			if mode == "pacing" {
				opts = append(opts, ratemonitor.WithPacing())
			}
			tr := f.transport(t, mode, &reported, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if mode == "Reserve" {
				var r *ratemonitor.Reservation
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

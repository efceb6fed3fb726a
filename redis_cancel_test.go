package ratemonitor

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// cancelAfterKey is the Redis store; the caller's context is cancelled right after the
// request key's Reserve returns (the caller gives up while the app key is being asked).
type cancelAfterKey struct {
	*redisstore.Store
	cancel atomic.Pointer[context.CancelFunc]
}

func (c *cancelAfterKey) Reserve(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Result, error) {
	res, err := c.Store.Reserve(ctx, s, key, n)
	if key != "app" {
		if f := c.cancel.Load(); f != nil {
			(*f)()
		}
	}
	return res, err
}

// A caller cancelling between the key's and the app key's reservation gets its context's
// error under either policy: no store failure is reported, nothing is sent, no slot is kept.
func TestRedisCancelIsNotAStoreError(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []ErrorPolicy{FailOpen, FailClosed} {
		st := &cancelAfterKey{Store: rs}
		var sent, reported atomic.Int64
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			sent.Add(1)
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		})
		key := "k-" + policy.String()
		tr := newTransport(t, base, WithStore(st), WithRules(minute), WithAppRules("app", minute), WithPacing(),
			WithErrorPolicy(policy), WithLogger(discard), WithErrorHandler(func(*http.Request, string, error) { reported.Add(1) }))
		ctx, cancel := context.WithCancel(context.Background())
		st.cancel.Store(&cancel)
		err := doKey(tr, ctx, key)
		st.cancel.Store(nil)
		var se *StoreError
		used := usedOf(t, tr, key)[0]
		if errors.As(err, &se) || reported.Load() != 0 || sent.Load() != 0 || used != 0 {
			t.Errorf("%v: cancelled by the caller: err %v (StoreError %v), store errors reported %d, passed to base %d, key counts %d; want ctx.Err(), nothing reported, sent or counted",
				policy, err, se != nil, reported.Load(), sent.Load(), used)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

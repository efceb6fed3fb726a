package dynamostore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// faultRT wraps a transport: fault decides per request (by X-Amz-Target and call number)
// whether to forward it and then replace the answer.
type faultRT struct {
	base  http.RoundTripper
	mu    sync.Mutex
	calls map[string]int
	fault func(target string, call int) (forward bool, status int, body string)
}

func faultClient(endpoint string, attempts int, fault func(string, int) (bool, int, string)) *dynamodb.Client {
	rt := &faultRT{base: http.DefaultTransport, calls: map[string]int{}}
	rt.fault = func(target string, call int) (bool, int, string) {
		if fw, st, body := fault(target, call); st != 0 {
			return fw, st, body
		}
		return false, 0, ""
	}
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("dummy", "dummy", ""),
		BaseEndpoint: aws.String(endpoint), RetryMaxAttempts: attempts,
		HTTPClient: &http.Client{Transport: passthrough{rt}},
	})
}

// passthrough forwards to the real server unless the fault says otherwise.
type passthrough struct{ f *faultRT }

func (p passthrough) RoundTrip(r *http.Request) (*http.Response, error) {
	target := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	p.f.mu.Lock()
	p.f.calls[target]++
	call := p.f.calls[target]
	p.f.mu.Unlock()
	forward, status, body := p.f.fault(target, call)
	if status == 0 {
		return p.f.base.RoundTrip(r)
	}
	if forward {
		resp, err := p.f.base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}}, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

const internalError = `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"lost answer"}`

// TestAmbiguousWriteNotReplayed: with the SDK's standard retries (config.LoadDefaultConfig: 3
// attempts, as the README tells programs in AWS to use), a write that landed but whose answer was
// lost (a 500 after the write) must not be sent again (the fixed window's ADD would count twice,
// and the versioned write would fail its condition, re-read its own write and consume again): the
// store makes one attempt per write, and the unclear outcome is an error.
func TestAmbiguousWriteNotReplayed(t *testing.T) {
	srv, c := server(t)
	ctx := context.Background()
	clk := clock.NewManual(t0)
	lostFirstUpdate := func(target string, call int) (bool, int, string) {
		if target == "UpdateItem" && call == 1 {
			return true, 500, internalError
		}
		return false, 0, ""
	}
	tb := must(tokenbucket.New(strategy.Rule{Limit: 10, Window: time.Hour}))
	st := newStore(t, faultClient(srv.Endpoint, 3, lostFirstUpdate), Options{Clock: clk})
	if _, err := st.Admit(ctx, tb, "tb", 1); err == nil {
		t.Error("token bucket: a write whose answer was lost returned no error")
	}
	if u, err := newStore(t, c, Options{Clock: clk}).Peek(ctx, tb, "tb", 0); err != nil || u.Usage[0].Used != 1 {
		t.Errorf("token bucket: one admission spent %d tokens (stats %+v)", u.Usage[0].Used, st.Stats())
	}
	fw := must(fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Hour}))
	plain := newStore(t, c, Options{Clock: clk})
	if _, err := plain.Admit(ctx, fw, "fw", 1); err != nil { // create the item: the next one takes the ADD
		t.Fatal(err)
	}
	st2 := newStore(t, faultClient(srv.Endpoint, 3, lostFirstUpdate), Options{Clock: clk})
	if _, err := st2.Admit(ctx, fw, "fw", 1); err == nil {
		t.Error("fixed window: a write whose answer was lost returned no error")
	}
	if u, _ := plain.Peek(ctx, fw, "fw", 0); u.Usage[0].Used != 2 {
		t.Errorf("fixed window: two admissions counted %d (stats %+v)", u.Usage[0].Used, st2.Stats())
	}
}

// TestThrottlingIsNotContention: ProvisionedThroughputExceeded is not contention.
func TestThrottlingIsNotContention(t *testing.T) {
	srv, _ := server(t)
	ctx := context.Background()
	throttle := func(target string, call int) (bool, int, string) {
		if target == "UpdateItem" || target == "GetItem" && call > 1 {
			return false, 400, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}`
		}
		return false, 0, ""
	}
	st := newStore(t, faultClient(srv.Endpoint, 1, throttle), Options{})
	for _, s := range []*engine.Strategy{must(tokenbucket.New(strategy.Rule{Limit: 10, Window: time.Hour})), must(fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Hour}))} {
		_, err := st.Admit(ctx, s, "k", 1)
		var pte *types.ProvisionedThroughputExceededException
		if err == nil || errors.Is(err, ErrContended) || !errors.As(err, &pte) {
			t.Errorf("%s: %v", s.Name(), err)
		}
		t.Logf("%s: %v", s.Name(), err)
	}
	if s := st.Stats(); s.ConditionalCheckFailures != 0 || s.Contended != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestServerKilledNoCallHangs: dynalite dies while 8 goroutines admit; every call returns (no
// hang: each has a 3 s context, and the test ends when all have). How many succeeded, and the
// last error (DynamoDB cannot be reached), are logged.
func TestServerKilledNoCallHangs(t *testing.T) {
	srv, c := server(t)
	st := newStore(t, c, Options{})
	s := must(tokenbucket.New(strategy.Rule{Limit: 1_000_000, Window: time.Hour}))
	var wg sync.WaitGroup
	var errs, oks atomic.Int64
	var sample atomic.Value
	for range 8 {
		wg.Go(func() {
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := st.Admit(ctx, s, "k", 1)
				cancel()
				if err != nil {
					errs.Add(1)
					sample.Store(err.Error())
				} else {
					oks.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	srv.Stop()
	wg.Wait()
	t.Logf("ok %d, errors %d: %v", oks.Load(), errs.Load(), sample.Load())
}

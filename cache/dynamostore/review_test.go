package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestContention: 2 stores (separate clients) × 16 goroutines on one key, for each
// strategy; admitted exact, ErrContended records nothing, stats consistent.
func TestContention(t *testing.T) {
	srv, c1 := server(t)
	c2 := dynalitetest.NewClient(srv.Endpoint)
	clk := clock.NewManual(t0.Add(7 * time.Second))
	ctx := context.Background()
	cases := []struct {
		name string
		s    *engine.Strategy
		lim  int
	}{
		{"tb", must(tokenbucket.New(strategy.Rule{Limit: 300, Window: time.Hour}, strategy.Rule{Limit: 200, Window: 24 * time.Hour})), 200},
		{"fw", must(fixedwindow.New(strategy.Rule{Limit: 300, Window: time.Hour}, strategy.Rule{Limit: 200, Window: 24 * time.Hour})), 200},
		{"rw", must(rollingwindow.New(strategy.Rule{Limit: 300, Window: time.Hour}, strategy.Rule{Limit: 200, Window: 24 * time.Hour, Granularity: time.Minute})), 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stores := []*Store{newStore(t, c1, Options{Clock: clk}), newStore(t, c2, Options{Clock: clk})}
			a, r, k := hammer(t, stores, 32, 40, tc.s, "hot-"+tc.name)
			s1, s2 := stores[0].Stats(), stores[1].Stats()
			t.Logf("admitted %d refused %d contended %d; stats %+v %+v", a, r, k, s1, s2)
			if a != int64(tc.lim) {
				t.Errorf("admitted %d, want %d", a, tc.lim)
			}
			if s1.Accepted+s2.Accepted != a || s1.Rejected+s2.Rejected != r || s1.Contended+s2.Contended != k {
				t.Errorf("stats disagree")
			}
			snap, err := stores[0].Peek(ctx, tc.s, "hot-"+tc.name, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := a
			if tc.name == "fw" {
				want = a + r // refused counted, contended not
			}
			if int64(snap.Usage[1].Used) != want {
				t.Errorf("used %d, want %d", snap.Usage[1].Used, want)
			}
		})
	}
}

// TestFixedWindowBoundaryContention: under steady load on one fixed-window key, the
// fast path never contends; but at every new window all writers fall into the versioned
// fallback and never return to the ADD, so they fail with ErrContended.
func TestFixedWindowBoundaryContention(t *testing.T) {
	srv, c1 := server(t)
	c2 := dynalitetest.NewClient(srv.Endpoint)
	clk := clock.NewManual(t0)
	ctx := context.Background()
	s := must(fixedwindow.New(strategy.Rule{Limit: 1_000_000, Window: time.Minute}))
	stores := []*Store{newStore(t, c1, Options{Clock: clk}), newStore(t, c2, Options{Clock: clk})}
	var contended, ok atomic.Int64
	for round := range 5 {
		clk.Set(t0.Add(time.Duration(round) * time.Minute)) // a new window each round
		var wg sync.WaitGroup
		for g := range 16 {
			st := stores[g%2]
			wg.Go(func() {
				for range 10 {
					_, err := st.Admit(ctx, s, "boundary", 1)
					switch {
					case errors.Is(err, ErrContended):
						contended.Add(1)
					case err != nil:
						t.Error(err)
					default:
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	t.Logf("ok %d contended %d; stats %+v %+v", ok.Load(), contended.Load(), stores[0].Stats(), stores[1].Stats())
	if contended.Load() > 0 {
		t.Errorf("%d of %d admissions under a limit of 1 000 000 returned ErrContended: the fallback never retries the ADD", contended.Load(), ok.Load()+contended.Load())
	}
}

// TestLongKey: a key longer than DynamoDB's 2048-byte partition key limit.
func TestLongKey(t *testing.T) {
	_, c := server(t)
	st := newStore(t, c, Options{})
	s := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}))
	key := strings.Repeat("k", 2048-len(KeyPrefix)+1)
	_, err := st.Admit(context.Background(), s, key, 1)
	if err != nil {
		t.Errorf("a key of %d bytes: %v", len(key), err)
	}
}

// TestInvalidUTF8Keys: distinct keys with invalid UTF-8 must not share a count.
func TestInvalidUTF8Keys(t *testing.T) {
	_, c := server(t)
	st := newStore(t, c, Options{})
	ctx := context.Background()
	s := must(fixedwindow.New(strategy.Rule{Limit: 1, Window: time.Hour}))
	d1, err := st.Admit(ctx, s, "tenant-\xff", 1)
	if err != nil || !d1.Allowed {
		t.Fatal(d1, err)
	}
	d2, err := st.Admit(ctx, s, "tenant-\xfe", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !d2.Allowed {
		t.Errorf("key %q was refused by key %q's count: %+v", "tenant-\xfe", "tenant-\xff", d2)
	}
}

// TestItemSize: a rolling window of 100 000 per day at 1 s granularity can hold 86 401
// buckets, more than DynamoDB's 400 KB item: Validate refuses it (and every operation with
// it) with an error that says to raise the granularity, before any item grows past the limit.
// At 1 min granularity the worst case (every bucket of the day used, each count large) fits,
// and writes succeed.
func TestItemSize(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk})
	ctx := context.Background()
	// 1 s buckets, asked for: the default for a day is 24 min, 61 buckets, which fits.
	fine := must(rollingwindow.New(strategy.Rule{Limit: 100_000, Window: 24 * time.Hour, Granularity: time.Second}))
	err := st.Validate(fine)
	if err == nil || !strings.Contains(err.Error(), "Granularity") {
		t.Fatalf("Validate of a 1 s-granularity day window: %v, want an error that says to raise the granularity", err)
	}
	t.Log(err)
	if _, err := st.Admit(ctx, fine, "big", 1); err == nil {
		t.Errorf("Admit with a refused strategy succeeded")
	}
	// The same day with the default granularity (24 min: 61 buckets) is accepted.
	if err := st.Validate(must(rollingwindow.New(strategy.Rule{Limit: 100_000, Window: 24 * time.Hour}))); err != nil {
		t.Errorf("Validate of a day at the default granularity: %v", err)
	}
	// Just within: the worst case at the limit is accepted, and the largest item it can reach
	// is written.
	coarse := must(rollingwindow.New(strategy.Rule{Limit: 100_000, Window: 24 * time.Hour, Granularity: 10 * time.Second}))
	if err := st.Validate(coarse); err != nil {
		t.Fatal(err)
	}
	cs := coarse.NewCounters()
	for i := range 8640 {
		coarse.Record(cs, t0.Add(time.Duration(i)*10*time.Second), 1<<40)
	}
	b, _ := cs[0].(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
	t.Logf("a full day at 10 s: %d bytes", len(b))
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ratelimits"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: KeyPrefix + "big"}, "version": &types.AttributeValueMemberN{Value: "1"},
		coarse.CounterID(0): &types.AttributeValueMemberB{Value: b}}})
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(8640 * 10 * time.Second))
	for i := range 20 {
		clk.Advance(10 * time.Second)
		if err := st.Record(ctx, coarse, "big", 1<<30); err != nil {
			t.Fatalf("record %d on a full day: %v", i, err)
		}
	}
}

// TestTTLSharedKey: a fixed window and a rolling window of a day on one key (their
// counters share the item); a fixed-window write must not lower the ttl below the instant the
// day's counts stop counting.
func TestTTLSharedKey(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk, IdleTimeout: time.Minute})
	ctx := context.Background()
	day := must(rollingwindow.New(strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Minute}))
	minute := must(fixedwindow.New(strategy.Rule{Limit: 60, Window: time.Minute}))
	if _, err := st.Admit(ctx, day, "tenant", 1); err != nil {
		t.Fatal(err)
	}
	dayEnd := t0.Add(24 * time.Hour).Unix()
	if got := n(t, getItem(t, c, "tenant"), "ttl"); got < fmt.Sprint(dayEnd) {
		t.Fatalf("ttl %s after the day rule", got)
	}
	for range 2 { // versioned (new counter) then ADD
		if _, err := st.Admit(ctx, minute, "tenant", 1); err != nil {
			t.Fatal(err)
		}
		it := getItem(t, c, "tenant")
		var ttl int64
		fmt.Sscan(n(t, it, "ttl"), &ttl)
		if ttl < dayEnd {
			t.Errorf("ttl %d after a fixed-window write: %v before the day rule's count stops counting (%d); DynamoDB may delete it", ttl, time.Duration(dayEnd-ttl)*time.Second, dayEnd)
		}
	}
}

// TestMissingVersion: an item without a version attribute (hand-written, or written by
// another tool) makes every write fail its condition: reported as contention, forever.
func TestMissingVersion(t *testing.T) {
	_, c := server(t)
	st := newStore(t, c, Options{})
	ctx := context.Background()
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ratelimits"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: KeyPrefix + "nov"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := must(tokenbucket.New(strategy.Rule{Limit: 10, Window: time.Second}))
	_, err = st.Admit(ctx, s, "nov", 1)
	if errors.Is(err, ErrContended) {
		t.Errorf("item without version: %v (stats %+v); want a damaged-item error or a write", err, st.Stats())
	}
	// version beyond int64 (or not a number)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ratelimits"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: KeyPrefix + "bigv"}, "version": &types.AttributeValueMemberN{Value: "9223372036854775808"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Admit(ctx, s, "bigv", 1)
	if errors.Is(err, ErrContended) {
		t.Errorf("version 2^63: %v; want a damaged-item error", err)
	}
}

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

// TestAmbiguousWrite: with the SDK's standard retries (config.LoadDefaultConfig: 3
// attempts, as the README tells programs in AWS to use), a write that landed but whose answer
// was lost (a 500 after the write) must not be sent again (the fixed window's ADD would count
// twice, and the versioned write would fail its condition, re-read its own write and consume
// again): the store makes one attempt per write, and the unclear outcome is an error.
func TestAmbiguousWrite(t *testing.T) {
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

// TestThrottling: ProvisionedThroughputExceeded is not contention.
func TestThrottling(t *testing.T) {
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

// TestCancelMidRetry: a context cancelled during the jitter returns its error, records
// nothing and leaves no goroutine or timer.
func TestCancelMidRetry(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	st := newStore(t, c, Options{Clock: clk, RetryBackoff: time.Hour, MaxRetries: 50})
	other := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 100, Window: time.Hour}))
	ctx, cancel := context.WithCancel(context.Background())
	st.beforeWrite = func(attempt int) {
		other.Record(context.Background(), s, "k", 1)
		if attempt == 2 {
			time.AfterFunc(5*time.Millisecond, cancel)
		}
	}
	start := time.Now()
	_, err := st.Admit(ctx, s, "k", 1)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	if u, _ := other.Peek(context.Background(), s, "k", 0); u.Usage[0].Used != 3 {
		t.Errorf("used %d, want the 3 of other", u.Usage[0].Used)
	}
	t.Logf("stats %+v", st.Stats())
	if s := st.Stats(); s.ConditionalCheckFailures != s.Retries+s.Contended {
		t.Errorf("stats %+v", s)
	}
}

// TestServerKilled: dynalite dies while 8 goroutines admit; every call returns (no
// hang), and errors after the kill say DynamoDB cannot be reached.
func TestServerKilled(t *testing.T) {
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

// TestOpenOrCreateRace: two processes starting at once on a table that does not exist.
func TestOpenOrCreateRace(t *testing.T) {
	srv, _ := server(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		c := dynalitetest.NewClient(srv.Endpoint)
		wg.Go(func() {
			st, err := OpenOrCreate(context.Background(), c, Options{Table: "fresh"})
			if err == nil {
				st.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
}

// TestBackoffOverflow: RetryBackoff·2^k overflows int64 before the 100 ms cap is
// applied; rand.N then panics on a negative bound.
func TestBackoffOverflow(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk, RetryBackoff: 3 * time.Hour, MaxRetries: 25})
	other := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 1000, Window: time.Hour}))
	ctx := context.Background()
	st.beforeWrite = func(int) { other.Record(ctx, s, "k", 1) }
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("panic: %v", r)
		}
	}()
	_, err := st.Admit(ctx, s, "k", 1)
	t.Log(err)
}

package dynamostore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

var t0 = time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)

// server starts dynalite and creates the table "ratelimits" in it.
func server(t testing.TB) (*dynalitetest.Server, *dynamodb.Client) {
	srv := dynalitetest.Start(t)
	srv.CreateTable(CreateTable, "ratelimits")
	return srv, srv.Client()
}

func newStore(t testing.TB, c *dynamodb.Client, opts Options) *Store {
	t.Helper()
	if opts.Table == "" {
		opts.Table = "ratelimits"
	}
	st, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func must(s *engine.Strategy, err error) *engine.Strategy {
	if err != nil {
		panic(err)
	}
	return s
}

// TestAdmit runs the shared admission table: every figure of every Decision under the fixed
// window (the ADD and its fallback), the token bucket and the rolling window, then Reserve,
// Release and Peek under the fixed window.
func TestAdmit(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(time.Unix(0, 0))
	storetest.Admit(t, newStore(t, c, Options{Clock: clk}), clk)
}

// TestSameAsMemory drives the memory store and the DynamoDB store with the same random
// operations (Record, Reserve, Release, Peek, Admit) under each strategy on one manual clock,
// and requires identical answers.
func TestSameAsMemory(t *testing.T) {
	_, c := server(t)
	algs := []engine.Algorithm{tokenbucket.Algorithm{}, fixedwindow.Algorithm{}, rollingwindow.Algorithm{}}
	var iteration atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual(t0.Add(time.Duration(rapid.Int64Range(0, 1e9).Draw(rt, "start µs")) * time.Microsecond))
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		dyn := newStore(t, c, Options{Clock: clk})
		alg := algs[rapid.IntRange(0, len(algs)-1).Draw(rt, "alg")]
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			g := []time.Duration{time.Millisecond, 100 * time.Millisecond}[rapid.IntRange(0, 1).Draw(rt, "unit")]
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit, Granularity: g,
				Window:   time.Duration(rapid.IntRange(1, 50).Draw(rt, "w")) * g * 10,
				Margin:   time.Duration(rapid.IntRange(0, 3).Draw(rt, "m")) * g,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := engine.New(alg, rules...)
		if err != nil {
			rt.Skip(err)
		}
		key := "same-" + strconv.FormatInt(iteration.Add(1), 10)
		storetest.Differential(rt, clk, mem, dyn, s, key, storetest.Ops{Admit: true})
	})
}

func getItem(t *testing.T, c *dynamodb.Client, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("ratelimits"),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "rate_limiter#" + key}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func n(t *testing.T, m map[string]types.AttributeValue, name string) string {
	t.Helper()
	a, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("attribute %q missing or not a number: %#v", name, m[name])
	}
	return a.Value
}

// TestItemLayout reads the item a token bucket and a fixed window write: the pk, the version
// bumped per write, ttl = now + IdleTimeout in Unix seconds (dynalite deletes nothing: the
// attribute is what is tested), and the exact bucket fields (DynamoDB normalises numbers: 8.5).
func TestItemLayout(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0.Add(250 * time.Millisecond))
	st := newStore(t, c, Options{Clock: clk, IdleTimeout: 10 * time.Minute})
	ctx := context.Background()
	// Two buckets: 10 per 4 s (2.5 tokens/s) and 100 per 100 s.
	s := must(tokenbucket.New(strategy.Rule{Limit: 10, Window: 4 * time.Second}, strategy.Rule{Limit: 100, Window: 100 * time.Second}))
	if _, err := st.Reserve(ctx, s, "tb", 3); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if d, err := st.Admit(ctx, s, "tb", 1); err != nil || !d.Allowed {
		t.Fatalf("admit: %+v, %v", d, err)
	}
	it := getItem(t, c, "tb")
	if got := it["pk"].(*types.AttributeValueMemberS).Value; got != "rate_limiter#tb" {
		t.Fatalf("pk = %q", got)
	}
	if v := n(t, it, "version"); v != "2" {
		t.Fatalf("version = %s after two writes, want 2", v)
	}
	wantTTL := strconv.FormatInt(t0.Add(time.Second+10*time.Minute).Unix()+1, 10) // rounded up
	if v := n(t, it, "ttl"); v != wantTTL {
		t.Fatalf("ttl = %s, want %s", v, wantTTL)
	}
	b := it["tb:10:4000000000"].(*types.AttributeValueMemberM).Value
	// 3 spent, 2.5 refilled, 1 spent: 1.5 tokens missing = 1.5 × 4e9 token·ns.
	for name, want := range map[string]string{"debt": "6000000000", "tokens": "8.5", "capacity": "10",
		"refill_rate": "2.5", "window_ns": "4000000000", "last_refill_time": strconv.FormatInt(t0.Add(1250*time.Millisecond).UnixNano(), 10)} {
		if got := n(t, b, name); got != want {
			t.Errorf("bucket 1 %s = %s, want %s", name, got, want)
		}
	}
	b2 := it["tb:100:100000000000"].(*types.AttributeValueMemberM).Value
	if got := n(t, b2, "debt"); got != "300000000000" { // 4 spent, 1 refilled
		t.Errorf("bucket 2 debt = %s", got)
	}
	// A refusal writes nothing: the version stays.
	if d, _ := st.Admit(ctx, s, "tb", 10); d.Allowed {
		t.Fatal("a burst of 10 fitted")
	}
	if v := n(t, getItem(t, c, "tb"), "version"); v != "2" {
		t.Fatalf("version = %s after a refusal, want 2", v)
	}

	// The fixed window: flat counters, and a ttl no earlier than the day window's end.
	fw := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}, strategy.Rule{Limit: 50, Window: 24 * time.Hour}))
	for range 2 {
		if _, err := st.Admit(ctx, fw, "fw", 1); err != nil {
			t.Fatal(err)
		}
	}
	it = getItem(t, c, "fw")
	for name, want := range map[string]string{
		"fw:60000000000#count": "2", "fw:60000000000#start": strconv.FormatInt(t0.UnixNano(), 10),
		"fw:86400000000000#count": "2", "fw:86400000000000#latest": strconv.FormatInt(clk.Now().UnixNano(), 10),
		"version": "2", "ttl": strconv.FormatInt(fixedwindow.WindowStart(t0, 24*time.Hour).Add(24*time.Hour).Unix(), 10),
	} {
		if got := n(t, it, name); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if s := st.Stats(); s.FastPathMisses != 1 || s.Accepted != 4 || s.Rejected != 1 {
		t.Errorf("stats %+v: want 1 fast-path miss (the new key), 4 accepted, 1 rejected", s)
	}
}

// TestConcurrentConsumes: 16 goroutines × 125 consumes of one token on one bucket of 250
// tokens, on a clock that does not move (no refill). Exactly 250 are admitted; every other
// consume is refused or returns ErrContended, and the bucket ends empty, never below. (Four
// times as many took a minute of CI under -race and found nothing more: every consume after
// the 250th meets the same full bucket.)
func TestConcurrentConsumes(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 250, Window: time.Hour}))
	a, r, k := hammer(t, []*Store{st}, 16, 125, s, "hot")
	t.Logf("admitted %d, refused %d, contended %d; stats %+v", a, r, k, st.Stats())
	if a+r+k != 2000 || a != 250 {
		t.Fatalf("admitted %d + refused %d + contended %d: want 250 admitted of 2000", a, r, k)
	}
	b := getItem(t, c, "hot")["tb:250:3600000000000"].(*types.AttributeValueMemberM).Value
	if debt, tokens := n(t, b, "debt"), n(t, b, "tokens"); debt != "900000000000000" || tokens != "0" {
		t.Fatalf("bucket after: debt %s, tokens %s; want empty (250 × 1 h)", debt, tokens)
	}
	if u := storetest.Used(t, st, s, "hot"); u[0] != 250 {
		t.Fatalf("used %v", u)
	}
	stats := st.Stats()
	if stats.Accepted != a || stats.Rejected != r || stats.Contended != k ||
		stats.ConditionalCheckFailures != stats.Retries+stats.Contended || stats.Retries < 0 {
		t.Fatalf("stats %+v disagree with the counts", stats)
	}
}

// TestRetriesAndStats makes another writer change the item between each read and write, and
// checks the retries, ErrContended and every counter exactly.
func TestRetriesAndStats(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk, MaxRetries: 2})
	other := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 10, Window: 10 * time.Second}))
	ctx := context.Background()
	interfere := func(attempts int) {
		st.beforeWrite = func(attempt int) {
			if attempt < attempts {
				if err := other.Record(ctx, s, "k", 1); err != nil {
					t.Error(err)
				}
			}
		}
	}
	want := func(w Stats) {
		t.Helper()
		if got := st.Stats(); got != w {
			t.Fatalf("stats %+v, want %+v", got, w)
		}
	}
	interfere(0)
	if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	want(Stats{Accepted: 1})
	interfere(1) // the first write fails, the retry succeeds
	if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	want(Stats{Accepted: 2, ConditionalCheckFailures: 1, Retries: 1})
	interfere(3) // all three attempts (1 + MaxRetries) fail
	if _, err := st.Reserve(ctx, s, "k", 1); !errors.Is(err, ErrContended) || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("err = %v, want ErrContended after 3 attempts", err)
	}
	want(Stats{Accepted: 2, ConditionalCheckFailures: 4, Retries: 3, Contended: 1})
	// Nothing was spent by the contended call: 2 admitted here, 1 + 3 recorded by other.
	if u := storetest.Used(t, st, s, "k"); u[0] != 6 {
		t.Fatalf("used %v, want 6", u)
	}
	interfere(0)
	if d, _ := st.Admit(ctx, s, "k", 5); d.Allowed {
		t.Fatal("5 fitted in 4 tokens")
	}
	want(Stats{Accepted: 2, Rejected: 1, ConditionalCheckFailures: 4, Retries: 3, Contended: 1})
	// No retries at all when MaxRetries < 0.
	st0 := newStore(t, c, Options{Clock: clk, MaxRetries: -1})
	st0.beforeWrite = func(int) { other.Record(ctx, s, "k", 1) }
	if err := st0.Record(ctx, s, "k", 1); !errors.Is(err, ErrContended) {
		t.Fatalf("err = %v", err)
	}
	if got := st0.Stats(); got != (Stats{ConditionalCheckFailures: 1, Contended: 1}) {
		t.Fatalf("stats %+v", got)
	}
}

// TestErrors: a missing table and an unreachable endpoint say what to do; a closed store, a bad
// count and a strategy the store cannot hold are refused.
func TestErrors(t *testing.T) {
	srv, c := server(t)
	ctx := context.Background()
	s := must(tokenbucket.New(strategy.Rule{Limit: 10, Window: time.Second}))
	missing := newStore(t, c, Options{Table: "nope"})
	err := missing.Record(ctx, s, "k", 1)
	if err == nil || !strings.Contains(err.Error(), `table "nope" not found: create it`) {
		t.Fatalf("missing table: %v", err)
	}
	if err := missing.Check(ctx); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Check on a missing table: %v", err)
	}
	if err := newStore(t, c, Options{}).Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	down := dynalitetest.NewClient("http://127.0.0.1:1")
	_, err = newStore(t, down, Options{}).Admit(ctx, s, "k", 1)
	if err == nil || !strings.Contains(err.Error(), "cannot reach DynamoDB: check the client's BaseEndpoint") {
		t.Fatalf("unreachable: %v", err)
	}
	_ = srv
	st := newStore(t, c, Options{})
	if err := st.Record(ctx, s, "k", 0); !errors.Is(err, cache.ErrInvalidCount) {
		t.Fatalf("count 0: %v", err)
	}
	if _, err := st.Admit(ctx, s, "k", 11); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Fatalf("burst 11: %v", err)
	}
	if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "Table is empty") {
		t.Fatalf("no table: %v", err)
	}
	if _, err := New(nil, Options{Table: "x"}); err == nil {
		t.Fatal("nil client accepted")
	}
	st.Close()
	if _, err := st.Peek(ctx, s, "k", 0); !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	// A damaged item is reported, not silently reset.
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ratelimits"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "rate_limiter#bad"}, "version": &types.AttributeValueMemberN{Value: "1"},
		"tb:10:1000000000": &types.AttributeValueMemberS{Value: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newStore(t, c, Options{}).Admit(ctx, s, "bad", 1); err == nil || !strings.Contains(err.Error(), "delete the item") {
		t.Fatalf("damaged item: %v", err)
	}
}

// hammer runs goroutines × per admissions of one request on key, spread over stores, and
// returns how many were admitted, refused and contended.
func hammer(t *testing.T, stores []*Store, goroutines, per int, s *engine.Strategy, key string) (admitted, refused, contended int64) {
	t.Helper()
	var a, r, k atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		st := stores[g%len(stores)]
		wg.Go(func() {
			for range per {
				d, err := st.Admit(context.Background(), s, key, 1)
				switch {
				case errors.Is(err, ErrContended):
					k.Add(1)
				case err != nil:
					t.Error(err)
					return
				case d.Allowed:
					a.Add(1)
				default:
					r.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return a.Load(), r.Load(), k.Load()
}

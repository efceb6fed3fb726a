package dynamostore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/internal/dynalite"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
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

// TestAdmitDecisionsExact runs the shared admission table: every figure of every Decision under the
// fixed window (the ADD and its fallback), the token bucket and the rolling window, then Reserve,
// Release and Peek under the fixed window.
func TestAdmitDecisionsExact(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(time.Unix(0, 0))
	storetest.Admit(t, newStore(t, c, Options{Clock: clk}), clk)
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

// TestErrorsSayWhatToDo: a missing table and an unreachable endpoint say what to do; a closed
// store, a bad count and a strategy the store cannot hold are refused.
func TestErrorsSayWhatToDo(t *testing.T) {
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
	down := dynalite.NewClient("http://127.0.0.1:1")
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

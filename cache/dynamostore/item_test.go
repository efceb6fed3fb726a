package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestItemLayoutExact reads the item a token bucket and a fixed window write: the pk, the version
// bumped per write, ttl = now + IdleTimeout in Unix seconds (dynalite deletes nothing: the
// attribute is what is tested), and the exact bucket fields (DynamoDB normalises numbers: 8.5).
func TestItemLayoutExact(t *testing.T) {
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
		"version": "2", "ttl": strconv.FormatInt(fixedcount.WindowStart(t0, 24*time.Hour).Add(24*time.Hour).Unix(), 10),
	} {
		if got := n(t, it, name); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if s := st.Stats(); s.FastPathMisses != 1 || s.Accepted != 4 || s.Rejected != 1 {
		t.Errorf("stats %+v: want 1 fast-path miss (the new key), 4 accepted, 1 rejected", s)
	}
}

// TestItemSizeRefusedBeforeLimit: a rolling window of 100 000 per day at 1 s granularity can hold
// 86 401 buckets, more than DynamoDB's 400 KB item: Validate refuses it (and every operation with
// it) with an error that says to raise the granularity, before any item grows past the limit. At 1
// min granularity the worst case (every bucket of the day used, each count large) fits, and writes
// succeed.
func TestItemSizeRefusedBeforeLimit(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk})
	ctx := context.Background()
	// 1 s buckets, asked for: the default for a day is 24 min, 61 buckets, which fits.
	fine := must(rollingwindow.New(strategy.Rule{Limit: 100_000, Window: 24 * time.Hour, Granularity: time.Second}))
	err := st.validate(fine)
	if err == nil || !strings.Contains(err.Error(), "Granularity") {
		t.Fatalf("Validate of a 1 s-granularity day window: %v, want an error that says to raise the granularity", err)
	}
	t.Log(err)
	if _, err := st.Admit(ctx, fine, "big", 1); err == nil {
		t.Errorf("Admit with a refused strategy succeeded")
	}
	// The same day with the default granularity (24 min: 61 buckets) is accepted.
	if err := st.validate(must(rollingwindow.New(strategy.Rule{Limit: 100_000, Window: 24 * time.Hour}))); err != nil {
		t.Errorf("Validate of a day at the default granularity: %v", err)
	}
	// Just within: the worst case at the limit is accepted, and the largest item it can reach
	// is written.
	coarse := must(rollingwindow.New(strategy.Rule{Limit: 100_000, Window: 24 * time.Hour, Granularity: 10 * time.Second}))
	if err := st.validate(coarse); err != nil {
		t.Fatal(err)
	}
	cs := coarse.NewCounters()
	for i := range 8640 {
		coarse.Record(cs, t0.Add(time.Duration(i)*10*time.Second), 1<<40)
	}
	b, _ := cs[0].(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
	t.Logf("a full day at 10 s: %d bytes", len(b))
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ratelimits"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: keyPrefix + "big"}, "version": &types.AttributeValueMemberN{Value: "1"},
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

// TestTTLCoversSharedKeysLongestRule: a fixed window and a rolling window of a day on one key
// (their counters share the item); a fixed-window write must not lower the ttl below the instant
// the day's counts stop counting.
func TestTTLCoversSharedKeysLongestRule(t *testing.T) {
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

// TestMissingVersionIsDamageNotContention: an item without a version attribute (hand-written, or
// written by another tool), or with one past int64, is a damaged item, not contention: every
// conditional write on it would fail, and ErrContended would be retried for ever.
func TestMissingVersionIsDamageNotContention(t *testing.T) {
	_, c := server(t)
	st := newStore(t, c, Options{})
	ctx := context.Background()
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ratelimits"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: keyPrefix + "nov"}}})
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
		"pk": &types.AttributeValueMemberS{Value: keyPrefix + "bigv"}, "version": &types.AttributeValueMemberN{Value: "9223372036854775808"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Admit(ctx, s, "bigv", 1)
	if errors.Is(err, ErrContended) {
		t.Errorf("version 2^63: %v; want a damaged-item error", err)
	}
}

package dynamostore

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ratemonitor/ratemonitor/internal/bucket"
	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Attribute names (see the package comment).
const (
	attrPK      = "pk"
	attrVersion = "version"
	attrTTL     = "ttl"

	fieldDebt     = "debt"
	fieldLast     = "last_refill_time"
	fieldTokens   = "tokens"
	fieldCapacity = "capacity"
	fieldRate     = "refill_rate"
	fieldWindow   = "window_ns"

	suffixStart  = "#start"
	suffixCount  = "#count"
	suffixLatest = "#latest"
)

type item = map[string]types.AttributeValue

// maxPKBytes is DynamoDB's limit on a partition key's length, in UTF-8 bytes.
const maxPKBytes = 2048

// hashedMark follows keyPrefix in the partition key of a key stored by its hash.
const hashedMark = "h#"

// pkValue is key's partition key: keyPrefix + key, or keyPrefix + "h#" + hex(SHA-256(key))
// when key is not valid UTF-8 (DynamoDB strings are UTF-8: the SDK would replace its invalid
// bytes with U+FFFD and distinct keys would share an item), when keyPrefix + key is longer
// than DynamoDB's 2048 bytes, or when key itself starts with "h#" (so that no key's
// partition key is another's hash).
func pkValue(key string) string {
	if utf8.ValidString(key) && len(keyPrefix)+len(key) <= maxPKBytes && !strings.HasPrefix(key, hashedMark) {
		return keyPrefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return keyPrefix + hashedMark + hex.EncodeToString(sum[:])
}

func pk(key string) types.AttributeValue { return &types.AttributeValueMemberS{Value: pkValue(key)} }

// noReplay is the per-call option of every write: the SDK makes one attempt, so that a write
// whose outcome is unclear (a lost answer, a timeout) is returned as an error and never sent
// again, where it could apply twice (an ADD counted twice, a consume re-read as another's).
func noReplay(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// get reads key's item with a strongly consistent read; nil when there is none. A read whose
// connection is lost while its answer arrives is made once more: the SDK does not retry that
// (it cannot know an operation is idempotent: aws/aws-sdk-go-v2#1825), and a read has no
// effect to repeat. A second loss is returned.
func (st *Store) get(ctx context.Context, key string) (item, error) {
	in := &dynamodb.GetItemInput{
		TableName:      aws.String(st.table),
		Key:            item{attrPK: pk(key)},
		ConsistentRead: aws.Bool(true),
	}
	out, err := st.client.GetItem(ctx, in)
	if err != nil && lostConnection(err) && ctx.Err() == nil {
		out, err = st.client.GetItem(ctx, in)
	}
	if err != nil {
		return nil, st.wrap("read", key, err)
	}
	return out.Item, nil
}

// lostConnection reports whether err says the connection went while a call was under way:
// closed under it (net.ErrClosed, as net/http's Transport does when writing the request
// fails after the answer began), reset by the peer, or cut short mid-answer.
func lostConnection(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// wrap says what failed and what to do about it.
func (st *Store) wrap(op, key string, err error) error {
	var nf *types.ResourceNotFoundException
	var send *smithyhttp.RequestSendError
	var nerr net.Error
	switch {
	case errors.As(err, &nf):
		return fmt.Errorf("ratemonitor: dynamodb store: %s key %q: table %q not found: create it (dynamostore.CreateTable, or partition key %q of type string) and check the client's region and endpoint: %w",
			op, key, st.table, attrPK, err)
	case errors.As(err, &send) || errors.As(err, &nerr):
		return fmt.Errorf("ratemonitor: dynamodb store: %s key %q: cannot reach DynamoDB: check the client's BaseEndpoint, region and network: %w",
			op, key, err)
	}
	return fmt.Errorf("ratemonitor: dynamodb store: %s key %q: %w", op, key, err)
}

func isConditionFailed(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}

// itemVersion returns the item's version and whether the item exists, or an error when an
// existing item has no valid version (missing, not a number, negative, or too large to bump):
// every conditional write on it would fail, which is damage, not contention.
func itemVersion(it item) (int64, bool, error) {
	if it == nil {
		return 0, false, nil
	}
	v, ok := getNum(it, attrVersion)
	if !ok || v < 0 || v == math.MaxInt64 {
		return 0, false, fmt.Errorf("attribute %q is missing or not a valid version number: delete the item to reset the key", attrVersion)
	}
	return v, true, nil
}

func getNum(m item, name string) (int64, bool) {
	a, ok := m[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(a.Value, 10, 64)
	return v, err == nil
}

// decode returns one counter per slot of s from it (empty counters for what it lacks).
func decode(s *engine.Strategy, it item) ([]engine.Counter, error) {
	cs := s.NewCounters()
	for j, c := range cs {
		id := s.CounterID(j)
		switch c := c.(type) {
		case *bucket.Bucket:
			a, ok := it[id]
			if !ok {
				continue
			}
			m, ok := a.(*types.AttributeValueMemberM)
			if !ok {
				return nil, fmt.Errorf("attribute %q is not a map: delete the item to reset the key", id)
			}
			debt, ok := getNum(m.Value, fieldDebt)
			if !ok || debt < 0 {
				return nil, fmt.Errorf("attribute %q has no valid %s: delete the item to reset the key", id, fieldDebt)
			}
			var last time.Time
			if _, present := m.Value[fieldLast]; present {
				ns, ok := getNum(m.Value, fieldLast)
				if !ok {
					return nil, fmt.Errorf("attribute %q has no valid %s: delete the item to reset the key", id, fieldLast)
				}
				last = time.Unix(0, ns)
			}
			c.SetState(debt, last)
		case *fixedcount.Counter:
			if _, ok := it[id+suffixCount]; !ok {
				continue
			}
			start, ok1 := getNum(it, id+suffixStart)
			count, ok2 := getNum(it, id+suffixCount)
			latest, ok3 := getNum(it, id+suffixLatest)
			if !ok1 || !ok2 || !ok3 || count < 0 {
				return nil, fmt.Errorf("attributes %q are not valid numbers: delete the item to reset the key", id+"#*")
			}
			c.SetState(time.Unix(0, start), count, time.Unix(0, latest))
		default:
			a, ok := it[id]
			if !ok {
				continue
			}
			b, ok := a.(*types.AttributeValueMemberB)
			if !ok {
				return nil, fmt.Errorf("attribute %q is not binary: delete the item to reset the key", id)
			}
			if err := c.(encoding.BinaryUnmarshaler).UnmarshalBinary(b.Value); err != nil {
				return nil, fmt.Errorf("attribute %q: %w; delete the item to reset the key", id, err)
			}
		}
	}
	return cs, nil
}

// preBucket is a token bucket's state as read, for the enough-tokens condition.
type preBucket struct {
	ok   bool // a bucket that had been used
	debt int64
	last time.Time
}

func snapshotBuckets(cs []engine.Counter) []preBucket {
	pre := make([]preBucket, len(cs))
	for j, c := range cs {
		if b, ok := c.(*bucket.Bucket); ok {
			debt, last := b.State()
			pre[j] = preBucket{ok: !last.IsZero(), debt: debt, last: last}
		}
	}
	return pre
}

// ttlFor returns max(now + idle, exp) in Unix seconds, rounded up.
func (st *Store) ttlFor(now, exp time.Time) int64 {
	t := now.Add(st.idle)
	if exp.After(t) {
		t = exp
	}
	sec := t.Unix()
	if t.Nanosecond() > 0 {
		sec++
	}
	return sec
}

// versionedUpdate builds the UpdateItem that writes cs under the version read (or for a new
// item), with the enough-tokens condition when consume > 0.
func (st *Store) versionedUpdate(s *engine.Strategy, key string, cs []engine.Counter, pre []preBucket, now time.Time, version int64, exists bool, consume int, oldTTL int64) *dynamodb.UpdateItemInput {
	names := map[string]string{"#v": attrVersion, "#ttl": attrTTL}
	values := item{
		":v1": num(version + 1),
		// Never lower the ttl: another strategy's counters in the item may count longer.
		":ttl": num(max(st.ttlFor(now, engine.Expiry(cs)), oldTTL)),
	}
	set := "SET #v = :v1, #ttl = :ttl"
	cond := "attribute_not_exists(" + attrPK + ")"
	if exists {
		cond = "#v = :v0"
		values[":v0"] = num(version)
	}
	for j, c := range cs {
		id, js := s.CounterID(j), strconv.Itoa(j)
		switch c := c.(type) {
		case *bucket.Bucket:
			r := s.SlotRule(j)
			names["#b"+js] = id
			values[":b"+js] = bucketAttr(c, r)
			set += ", #b" + js + " = :b" + js
			if consume > 0 && exists && pre[j].ok {
				if bound, ok := debtBound(s, j, pre[j], now, consume); ok {
					names["#debt"] = fieldDebt
					values[":k"+js] = num(bound)
					cond += " AND #b" + js + ".#debt <= :k" + js
				}
			}
		case *fixedcount.Counter:
			start, count := c.State()
			names["#s"+js], names["#c"+js], names["#l"+js] = id+suffixStart, id+suffixCount, id+suffixLatest
			values[":s"+js], values[":c"+js], values[":l"+js] = num(start.UnixNano()), num(count), num(c.Latest().UnixNano())
			set += ", #s" + js + " = :s" + js + ", #c" + js + " = :c" + js + ", #l" + js + " = :l" + js
		default:
			b, _ := c.(encoding.BinaryMarshaler).MarshalBinary()
			names["#b"+js] = id
			values[":b"+js] = &types.AttributeValueMemberB{Value: b}
			set += ", #b" + js + " = :b" + js
		}
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       item{attrPK: pk(key)},
		UpdateExpression:          aws.String(set),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
}

// debtBound returns the largest stored debt at which the bucket in slot j, refilled from its
// stored instant to now, still holds consume tokens for every rule counted in it: the
// enough-tokens condition, debt ≤ (limit − n)·W + elapsed·capacity. ok is false when the bound
// exceeds int64 (the condition always holds).
func debtBound(s *engine.Strategy, j int, p preBucket, now time.Time, consume int) (int64, bool) {
	r := s.SlotRule(j)
	capacity, w := int64(r.Limit), int64(r.EffectiveWindow())
	limit := int64(math.MaxInt64)
	for i := range s.NumRules() {
		if s.SlotOf(i) == j {
			limit = min(limit, int64(s.Rule(i).EffectiveLimit()))
		}
	}
	allowed := (limit - int64(consume)) * w // ≤ capacity·W ≤ 2^62
	e := max(0, now.UnixNano()-p.last.UnixNano())
	if e > (math.MaxInt64-allowed)/capacity {
		return 0, false
	}
	return allowed + e*capacity, true
}

// bucketAttr is a token bucket as the map attribute the package comment describes.
func bucketAttr(b *bucket.Bucket, r strategy.Rule) types.AttributeValue {
	debt, last := b.State()
	capacity, w := int64(r.Limit), int64(r.EffectiveWindow())
	tokens := new(big.Rat).SetFrac(
		new(big.Int).Sub(new(big.Int).Mul(big.NewInt(capacity), big.NewInt(w)), big.NewInt(debt)), big.NewInt(w))
	rate := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(capacity), big.NewInt(1e9)), big.NewInt(w))
	m := item{
		fieldDebt:     num(debt),
		fieldTokens:   &types.AttributeValueMemberN{Value: tokens.FloatString(9)},
		fieldCapacity: num(capacity),
		fieldRate:     &types.AttributeValueMemberN{Value: rate.FloatString(9)},
		fieldWindow:   num(w),
	}
	if !last.IsZero() {
		m[fieldLast] = num(last.UnixNano())
	}
	return &types.AttributeValueMemberM{Value: m}
}

// CreateTable creates a table the store can use (partition key pk, a string; on-demand
// billing) and waits up to 5 minutes for it to be active. It does not enable TTL: see
// EnableTTL.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	return createTable(ctx, client, table, false)
}

// createTable is CreateTable; with exists, a table of that name being created or already
// there (ResourceInUseException: another process came first) is waited for, not an error.
func createTable(ctx context.Context, client *dynamodb.Client, table string, exists bool) error {
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !(exists && errors.As(err, &inUse)) {
		return fmt.Errorf("ratemonitor: dynamodb store: create table %q: %w", table, err)
	}
	return waitActive(ctx, client, table)
}

// waitActive waits up to 5 minutes for table to exist and be active.
func waitActive(ctx context.Context, client *dynamodb.Client, table string) error {
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 5*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute); err != nil {
		return fmt.Errorf("ratemonitor: dynamodb store: table %q did not become active: %w", table, err)
	}
	return nil
}

// EnableTTL turns on DynamoDB's time to live on the attribute ttl, so that DynamoDB deletes
// idle keys' items (some time after ttl passes; the store never relies on it). dynalite does
// not implement it.
func EnableTTL(ctx context.Context, client *dynamodb.Client, table string) error {
	_, err := client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("ratemonitor: dynamodb store: enable TTL on %q: %w", table, err)
	}
	return nil
}

// Check asks DynamoDB about the store's table (DescribeTable) and returns an error that says
// what to do when it is missing, unreachable, or has another key than pk (string).
func (st *Store) Check(ctx context.Context) error {
	_, err := st.describe(ctx)
	return err
}

// describe is Check, returning the table's status.
func (st *Store) describe(ctx context.Context) (types.TableStatus, error) {
	out, err := st.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(st.table)})
	if err != nil {
		return "", st.wrap("check", "", err)
	}
	ks := out.Table.KeySchema
	if len(ks) != 1 || aws.ToString(ks[0].AttributeName) != attrPK {
		return "", fmt.Errorf("ratemonitor: dynamodb store: table %q must have only the partition key %q (string); create one with dynamostore.CreateTable", st.table, attrPK)
	}
	return out.Table.TableStatus, nil
}

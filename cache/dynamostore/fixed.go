package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// fixedAdd counts n attempts in every fixed window of s with one UpdateItem: ADD n to each
// counter, under the condition that each counter's window is the one that holds now and its
// latest instant is not after now. With admit it returns the decision engine.Strategy.Admit
// gives on the state before the ADD (which the returned state minus n is). When the condition
// fails, it makes one attempt of the versioned update; when that fails too (another writer
// came first, typically starting the same new window), it tries the ADD again, and so on, up
// to the retries.
func (st *Store) fixedAdd(ctx context.Context, s *engine.Strategy, key string, n int, admit bool) (strategy.Decision, error) {
	for attempt := 0; ; attempt++ {
		d, ok, err := st.fixedFast(ctx, s, key, n, admit)
		if ok || err != nil {
			return d, err
		}
		st.misses.Add(1)
		done, err := st.updateOnce(ctx, s, key, attempt, func(cs []engine.Counter, now time.Time) (bool, int) {
			if admit {
				d, _ = s.Admit(cs, now, n)
			} else {
				s.Record(cs, now, n)
			}
			return true, 0
		})
		if done || err != nil {
			return d, err
		}
		op := "record"
		if admit {
			op = "admit"
		}
		if err := st.contention(ctx, op, key, attempt); err != nil {
			return strategy.Decision{}, err
		}
	}
}

// fixedFast is the ADD of fixedAdd; ok is false when its condition failed. It never lowers
// the item's ttl (which another strategy's counters on the key may have set later): the ADD
// sets ttl under the condition that the stored one is not later, and when that is what
// failed, a second ADD leaves ttl alone under the condition that it is later.
func (st *Store) fixedFast(ctx context.Context, s *engine.Strategy, key string, n int, admit bool) (d strategy.Decision, ok bool, err error) {
	now := st.clock.Now()
	names := map[string]string{"#v": attrVersion, "#ttl": attrTTL}
	values := item{":n": num(int64(n)), ":one": num(1), ":now": num(now.UnixNano())}
	add, set, cond := "ADD #v :one", "", ""
	var exp time.Time
	for j := range s.Slots() {
		id, js := s.CounterID(j), strconv.Itoa(j)
		w := s.SlotRule(j).EffectiveWindow()
		start := fixedcount.WindowStart(now, w)
		if end := start.Add(w); end.After(exp) {
			exp = end
		}
		names["#s"+js], names["#c"+js], names["#l"+js] = id+suffixStart, id+suffixCount, id+suffixLatest
		values[":s"+js] = num(start.UnixNano())
		add += ", #c" + js + " :n"
		if set != "" {
			set += ", "
		}
		set += "#l" + js + " = :now"
		if cond != "" {
			cond += " AND "
		}
		cond += "#s" + js + " = :s" + js + " AND #l" + js + " <= :now"
	}
	values[":ttl"] = num(st.ttlFor(now, exp))
	var out *dynamodb.UpdateItemOutput
	for _, laterTTL := range []bool{false, true} {
		update, c := add+" SET #ttl = :ttl, "+set, cond+" AND (attribute_not_exists(#ttl) OR #ttl <= :ttl)"
		if laterTTL {
			update, c = add+" SET "+set, cond+" AND #ttl > :ttl"
		}
		out, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(st.table),
			Key:                       item{attrPK: pk(key)},
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String(c),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			ReturnValues:              types.ReturnValueAllNew,
		}, noReplay)
		if err == nil || !isConditionFailed(err) {
			break
		}
	}
	if err != nil {
		if isConditionFailed(err) {
			return strategy.Decision{}, false, nil
		}
		return strategy.Decision{}, false, st.wrap("write", key, err)
	}
	if !admit {
		return strategy.Decision{}, true, nil
	}
	cs, err := decode(s, out.Attributes)
	if err != nil {
		return strategy.Decision{}, false, err
	}
	// The state before the ADD: each count less n, at a latest instant ≤ now.
	for _, c := range cs {
		fc := c.(*fixedcount.Counter)
		start, count := fc.State()
		fc.SetState(start, count-int64(n), time.Time{})
	}
	d, err = s.Admit(cs, now, n)
	return d, true, err
}

package dynamostore

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// fixedAdd counts n attempts in every fixed window of s with one UpdateItem: ADD n to each
// counter, under the condition that each counter's window is the one that holds now and its
// latest instant is not after now. With admit it returns the decision strategy.Strategy.Admit
// gives on the state before the ADD (which the returned state minus n is). When the condition
// fails, it falls back to the versioned update.
func (st *Store) fixedAdd(ctx context.Context, s *strategy.Strategy, key string, n int, admit bool) (strategy.Decision, error) {
	now := st.clock.Now()
	names := map[string]string{"#v": attrVersion, "#ttl": attrTTL}
	values := item{":n": num(int64(n)), ":one": num(1), ":now": num(now.UnixNano())}
	add, set, cond := "ADD #v :one", "SET #ttl = :ttl", ""
	var exp time.Time
	for j := range s.Slots() {
		id, js := s.CounterID(j), strconv.Itoa(j)
		w := s.SlotRule(j).EffectiveWindow()
		start := fixedwindow.WindowStart(now, w)
		if end := start.Add(w); end.After(exp) {
			exp = end
		}
		names["#s"+js], names["#c"+js], names["#l"+js] = id+suffixStart, id+suffixCount, id+suffixLatest
		values[":s"+js] = num(start.UnixNano())
		add += ", #c" + js + " :n"
		set += ", #l" + js + " = :now"
		if cond != "" {
			cond += " AND "
		}
		cond += "#s" + js + " = :s" + js + " AND #l" + js + " <= :now"
	}
	values[":ttl"] = num(st.ttlFor(now, exp))
	out, err := st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       item{attrPK: pk(key)},
		UpdateExpression:          aws.String(add + " " + set),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err == nil {
		if !admit {
			return strategy.Decision{}, nil
		}
		cs, err := decode(s, out.Attributes)
		if err != nil {
			return strategy.Decision{}, err
		}
		// The state before the ADD: each count less n, at a latest instant ≤ now.
		for _, c := range cs {
			fc := c.(*fixedwindow.Counter)
			start, count := fc.State()
			fc.SetState(start, count-int64(n), time.Time{})
		}
		return s.Admit(cs, now, n)
	}
	if !isConditionFailed(err) {
		return strategy.Decision{}, st.wrap("write", key, err)
	}
	st.misses.Add(1)
	var d strategy.Decision
	op := "record"
	if admit {
		op = "admit"
	}
	err = st.update(ctx, op, s, key, func(cs []strategy.Counter, now time.Time) (bool, int) {
		if admit {
			d, _ = s.Admit(cs, now, n)
		} else {
			s.Record(cs, now, n)
		}
		return true, 0
	})
	return d, err
}

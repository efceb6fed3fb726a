package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// counter is a go-redis hook that counts the commands sent: round trips per operation.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkRedis measures record and reserve against the test's own redis-server, with one and
// three rules, beside a plain EVALSHA of a one-line script: the floor any scripted store pays.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	client := srv.Client()
	hook := &counter{}
	client.AddHook(hook)
	ctx := context.Background()
	report := func(b *testing.B) {
		b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
	}
	b.Run("floor-evalsha-return-1", func(b *testing.B) {
		one := redis.NewScript("return 1")
		one.Load(ctx, client)
		hook.n.Store(0)
		for b.Loop() {
			if err := one.Run(ctx, client, []string{"{floor}"}).Err(); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	big := 1 << 30
	sets := map[string][]strategy.Rule{
		"1-rule": {{Limit: big, Window: time.Minute}},
		"3-rules": {{Limit: big, Window: time.Minute}, {Limit: big, Window: time.Hour, Granularity: time.Minute},
			{Limit: big, Window: 24 * time.Hour, Granularity: time.Minute}},
	}
	st := newStore(b, client, Options{})
	for _, name := range []string{"1-rule", "3-rules"} {
		s := mustStrategy(b, sets[name]...)
		b.Run("record/"+name, func(b *testing.B) {
			st.Record(ctx, s, "bench", 1)
			hook.n.Store(0)
			for b.Loop() {
				if err := st.Record(ctx, s, "bench", 1); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run("reserve/"+name, func(b *testing.B) {
			hook.n.Store(0)
			for b.Loop() {
				if _, err := st.Reserve(ctx, s, "bench", 1); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
}

// BenchmarkRedisAdmit measures the middleware's operation, Admit (one script call that decides,
// records and returns every rule's state), under each strategy with one and three rules, and
// Reserve under the two newer ones.
func BenchmarkRedisAdmit(b *testing.B) {
	srv := redistest.Start(b)
	client := srv.Client()
	hook := &counter{}
	client.AddHook(hook)
	ctx := context.Background()
	st := newStore(b, client, Options{})
	big := 1 << 30
	sets := map[string][]strategy.Rule{
		"1-rule": {{Limit: big, Window: time.Minute}},
		"3-rules": {{Limit: big, Window: time.Minute}, {Limit: big, Window: time.Hour, Granularity: time.Minute},
			{Limit: big, Window: 24 * time.Hour, Granularity: time.Minute}},
	}
	algs := []engine.Algorithm{storetest.FixedWindow, storetest.TokenBucket, storetest.RollingWindow}
	for _, alg := range algs {
		for _, name := range []string{"1-rule", "3-rules"} {
			rules := sets[name]
			if alg == storetest.TokenBucket {
				// a token bucket needs limit × window ≤ 2^62 ns
				rules = []strategy.Rule{{Limit: 1 << 20, Window: time.Minute}, {Limit: 1 << 20, Window: time.Hour}, {Limit: 50_000, Window: 24 * time.Hour}}[:len(rules)]
			}
			s, err := engine.New(alg, rules...)
			if err != nil {
				b.Fatal(err)
			}
			ops := []string{"admit"}
			if alg.Name() != "rollingwindow" {
				ops = append(ops, "reserve")
			}
			for _, op := range ops {
				b.Run(alg.Name()+"/"+op+"/"+name, func(b *testing.B) {
					st.Record(ctx, s, "bench", 1)
					hook.n.Store(0)
					for b.Loop() {
						var err error
						if op == "admit" {
							_, err = st.Admit(ctx, s, "bench", 1)
						} else {
							_, err = st.Reserve(ctx, s, "bench", 1)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/op")
				})
			}
		}
	}
}

package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// serverMicros runs f b.N times after CONFIG RESETSTAT and reports what the server says one
// EVALSHA cost it (INFO commandstats, usec_per_call: the script's run time, its redis.calls
// included, without the network or the client), as "server-µs/op". Only this benchmark's client
// talks to the server, and every script is loaded first, so every call is an EVALSHA.
func serverMicros(b *testing.B, c *redis.Client, f func() error) float64 {
	b.Helper()
	resetStat(b, c)
	for b.Loop() {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	us := evalshaMicros(b, c)
	b.ReportMetric(us, "server-µs/op")
	return us
}

// referenceMicros runs f n times outside the benchmark's timing and returns the server's µs
// per EVALSHA, as serverMicros does.
func referenceMicros(b *testing.B, c *redis.Client, n int, f func() error) float64 {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	resetStat(b, c)
	for range n {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	return evalshaMicros(b, c)
}

func resetStat(b *testing.B, c *redis.Client) {
	b.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// evalshaMicros reads usec_per_call of evalsha from INFO commandstats.
func evalshaMicros(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	us := -1.0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, kv := range strings.Split(strings.TrimSpace(line[len("cmdstat_evalsha:"):]), ",") {
			if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
				us, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	if us < 0 {
		b.Fatalf("no evalsha in INFO commandstats: %q", info)
	}
	return us
}

// BenchmarkServerCost: what a decision costs Redis's one thread, which bounds a fleet's
// throughput (issue 14), side by side in one run: a one-line script (the floor of any EVALSHA);
// TIME + GET + SET KEEPTTL, the floor of a script that reads the clock and one key and writes
// it back; go-redis/redis_rate v10's GCRA Allow on one rule; and ours, reserve and record on
// the rolling window, with 1 rule (1m at 1 s granularity) and 3 rules (1m@1s, 1h@1m, 24h@10m:
// at most 60, 60 and 144 buckets, the granularities a day of Xero-style limits needs so that a
// key stays under MaxBuckets and a request is held at most a minute or ten too long in the long
// windows), all limits too large to refuse. "3-rules-full" runs on a key whose buckets are all
// in use (one request each second of the last minute, each minute of the last hour, each 10
// minutes of the last day): the value read and written is then about 4 KiB instead of 100
// bytes. Ours report "x-redis_rate", their cost over redis_rate's measured right after them
// with as many calls: the machine's load (other processes on its cores) moves both alike.
//
// Run: go test -run XXX -bench ServerCost -benchtime 10000x -count 5 ./cache/redisstore/
func BenchmarkServerCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	ctx := context.Background()
	floor := redis.NewScript("return 1")
	lean := redis.NewScript("local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) or 'x' redis.call('SET', KEYS[1], v, 'KEEPTTL') return 1")
	for _, s := range []*redis.Script{floor, lean} {
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("floor-return-1", func(b *testing.B) {
		serverMicros(b, c, func() error { return floor.Run(ctx, c, []string{"{floor}"}).Err() })
	})
	b.Run("floor-time-get-set-keepttl", func(b *testing.B) {
		serverMicros(b, c, func() error { return lean.Run(ctx, c, []string{"{lean}"}).Err() })
	})
	big := 1 << 30
	limiter := redis_rate.NewLimiter(c)
	gcra := redis_rate.Limit{Rate: big, Burst: big, Period: time.Minute}
	if _, err := limiter.Allow(ctx, "bench", gcra); err != nil { // loads its script
		b.Fatal(err)
	}
	allow := func() error { _, err := limiter.Allow(ctx, "bench", gcra); return err }
	b.Run("redis_rate-allow-1-rule", func(b *testing.B) { serverMicros(b, c, allow) })
	sets := []struct {
		name  string
		rules []strategy.Rule
		full  bool
	}{
		{"1-rule", []strategy.Rule{{Limit: big, Window: time.Minute}}, false},
		{"3-rules", []strategy.Rule{{Limit: big, Window: time.Minute}, {Limit: big, Window: time.Hour, Granularity: time.Minute},
			{Limit: big, Window: 24 * time.Hour, Granularity: 10 * time.Minute}}, false},
	}
	sets = append(sets, sets[1])
	sets[2].name, sets[2].full = "3-rules-full", true
	st := newStore(b, c, Options{})
	for _, set := range sets {
		s := mustStrategy(b, set.rules...)
		key := "bench-" + set.name
		if set.full {
			fill(b, c, s, key)
		}
		if err := st.Record(ctx, s, key, 1); err != nil { // loads the script
			b.Fatal(err)
		}
		for _, op := range []string{"reserve", "record"} {
			b.Run(op+"/"+set.name, func(b *testing.B) {
				us := serverMicros(b, c, func() error {
					if op == "record" {
						return st.Record(ctx, s, key, 1)
					}
					_, err := st.Reserve(ctx, s, key, 1)
					return err
				})
				b.ReportMetric(us/referenceMicros(b, c, b.N, allow), "x-redis_rate")
			})
		}
	}
}

// fill records on key under s, on a manual clock that ends at Redis's now, one request each 10
// minutes of the last day, each minute of the last hour and each second of the last minute.
func fill(b *testing.B, c *redis.Client, s *engine.Strategy, key string) {
	b.Helper()
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.NewManual(now.Add(-24 * time.Hour))
	st := newStore(b, c, Options{Clock: clk})
	for _, span := range []struct{ until, step time.Duration }{{time.Hour, 10 * time.Minute}, {time.Minute, time.Minute}, {0, time.Second}} {
		for clk.Now().Before(now.Add(-span.until)) {
			if err := st.Record(ctx, s, key, 1); err != nil {
				b.Fatal(err)
			}
			clk.Advance(span.step)
		}
	}
	if n := c.StrLen(ctx, st.Keys(s, key)[0]).Val(); n < 4000 {
		b.Fatalf("the full key holds %d bytes, want about 4 KiB", n)
	}
}

package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_800_000_000, 0)

var mustStrategy = storetest.Strategy

// newStore makes a store for a test. Unless the test is about timeouts (and sets one), each
// operation may take 5 s: CI runs every package at once on 2 cores, Node's dynalite among them,
// and the default 100 ms is a production setting, not what these tests check.
func newStore(t testing.TB, c redis.UniversalClient, opts Options) *Store {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	st, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func usedOf(t testing.TB, st cache.Store, s *engine.Strategy, key string) []int {
	return storetest.Used(t, st, s, key)
}

// TestScriptsAnswerWorkedValues runs the worked values of rollingwindow's TestAnswersMatchWorkedValues through the Lua script, on a manual clock.
func TestScriptsAnswerWorkedValues(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	st := newStore(t, srv.Client(), Options{Clock: clk})
	ctx := context.Background()
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	at := func(sec int) { clk.Set(t0.Add(time.Duration(sec) * time.Second)) }
	wait := func(key string, n int) time.Duration {
		snap, err := st.Peek(ctx, s, key, n)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Wait
	}
	at(0)
	st.Record(ctx, s, "a", 60)
	if u, w := usedOf(t, st, s, "a")[0], wait("a", 1); u != 60 || w != time.Minute {
		t.Errorf("60 at 0: used %d wait %v", u, w)
	}
	at(30)
	if w := wait("a", 1); w != 30*time.Second {
		t.Errorf("wait at 30: %v", w)
	}
	at(60)
	if u := usedOf(t, st, s, "a")[0]; u != 0 {
		t.Errorf("used at s+W: %d", u)
	}
	// 1 each second 0..59
	for i := 100; i < 160; i++ {
		at(i)
		st.Record(ctx, s, "b", 1)
	}
	if u, w1, w10, w60 := usedOf(t, st, s, "b")[0], wait("b", 1), wait("b", 10), wait("b", 60); u != 60 || w1 != time.Second || w10 != 10*time.Second || w60 != time.Minute {
		t.Errorf("1/s at 159: used %d waits %v %v %v", u, w1, w10, w60)
	}
	at(160)
	if u, w1, w2 := usedOf(t, st, s, "b")[0], wait("b", 1), wait("b", 2); u != 59 || w1 != 0 || w2 != time.Second {
		t.Errorf("1/s at 160: used %d waits %v %v", u, w1, w2)
	}
	if _, err := st.Peek(ctx, s, "b", 61); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 61: %v", err)
	}
}

// TestDifferential drives the memory store and the Redis store with the same random sequences
// of records, reservations, releases, queries and clock moves, on the same manual clock, and
// requires identical answers.
func TestDifferential(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	var iteration atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual(t0)
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		red := newStore(t, client, Options{Clock: clk})
		defer red.Close()
		grans := []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond}
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			g := grans[rapid.IntRange(0, 2).Draw(rt, "g")]
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit, Granularity: g,
				Window:   time.Duration(rapid.IntRange(1, 50).Draw(rt, "w")) * g * 10,
				Margin:   time.Duration(rapid.IntRange(0, 3).Draw(rt, "m")) * g,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s := mustStrategy(t, rules...)
		key := "diff-" + strconv.FormatInt(iteration.Add(1), 10)
		storetest.Differential(rt, clk, mem, red, s, key, storetest.Ops{Admit: true, Sync: true})
	})
}

// TestKeysAreIsolated: keys with braces, colons, spaces, newlines and 1 KiB of arbitrary bytes
// neither reach nor collide with each other, and all Redis keys of one key share a hash tag.
func TestKeysAreIsolated(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	st := newStore(t, client, Options{Slack: 500 * time.Millisecond, CheckInterval: -1}) // no fleet key: only the scripts' keys are counted
	s := mustStrategy(t, strategy.Rule{Limit: 100, Window: time.Minute}, strategy.Rule{Limit: 1000, Window: time.Hour})
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 1024)
	for i := range junk {
		junk[i] = byte(rng.IntN(256))
	}
	keys := []string{"", "{", "}", "{}", "a}b{c", ":", "a:b", "a b", "a\nb", "tenant", "tenant}", "{tenant}", string(junk), string(junk[:1023])}
	ctx := context.Background()
	for i, k := range keys {
		if err := st.Record(ctx, s, k, i+1); err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
	}
	seen := map[string]bool{}
	for i, k := range keys {
		if u := usedOf(t, st, s, k); u[0] != i+1 || u[1] != i+1 {
			t.Errorf("key %q: used %v, want %d", k, u, i+1)
		}
		tag := ""
		for _, rk := range st.Keys(s, k) {
			open := strings.IndexByte(rk, '{')
			end := strings.IndexByte(rk[open+1:], '}')
			if open < 0 || end <= 0 {
				t.Fatalf("redis key %q has no non-empty hash tag", rk)
			}
			if tg := rk[open+1 : open+1+end]; tag == "" {
				tag = tg
			} else if tg != tag {
				t.Errorf("key %q: hash tags %q and %q differ", k, tag, tg)
			}
			if seen[rk] {
				t.Errorf("redis key %q shared by two user keys", rk)
			}
			seen[rk] = true
		}
	}
	// Every key written has a TTL of at least its longest window and at most that + slack:
	// one Redis key per user key holds both rules.
	all, err := client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(keys) {
		t.Errorf("%d redis keys, want %d", len(all), len(keys))
	}
	for _, rk := range all {
		ttl, _ := client.PTTL(ctx, rk).Result()
		w := time.Hour
		if ttl < w-time.Second || ttl > w+500*time.Millisecond {
			t.Errorf("%q: TTL %v, want within [%v, %v]", rk, ttl, w, w+500*time.Millisecond)
		}
	}
}

// TestStoresShareServerClock: two stores (two processes, say) share Redis's clock: each sees what the
// other recorded, and together they never admit more than the limit.
func TestStoresShareServerClock(t *testing.T) {
	srv := redistest.Start(t)
	a := newStore(t, srv.Client(), Options{})
	b := newStore(t, srv.Client(), Options{})
	s := mustStrategy(t, strategy.Rule{Limit: 50, Window: time.Minute})
	ctx := context.Background()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		st := a
		if g%2 == 1 {
			st = b
		}
		wg.Go(func() {
			for range 20 {
				res, err := st.Reserve(ctx, s, "shared", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 50 {
		t.Errorf("allowed %d of 160, want exactly the limit 50", allowed.Load())
	}
	if ua, ub := usedOf(t, a, s, "shared"), usedOf(t, b, s, "shared"); ua[0] != 50 || ub[0] != 50 {
		t.Errorf("used %v and %v", ua, ub)
	}
}

// TestFlushedScriptReloadedCountsOnce: after SCRIPT FLUSH the script is loaded again, and the operation counts once.
func TestFlushedScriptReloadedCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	st := newStore(t, client, Options{})
	s := mustStrategy(t, strategy.Rule{Limit: 50, Window: time.Minute})
	ctx := context.Background()
	st.Record(ctx, s, "k", 1)
	client.ScriptFlush(ctx)
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if u := usedOf(t, st, s, "k"); u[0] != 2 {
		t.Errorf("used %d after a reload, want 2", u[0])
	}
}

// TestTimeoutIsNotReplayed: an operation that times out is not sent again; when Redis gets to
// it, it counts once.
func TestTimeoutIsNotReplayed(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	st := newStore(t, client, Options{Timeout: 50 * time.Millisecond})
	s := mustStrategy(t, strategy.Rule{Limit: 50, Window: time.Minute})
	ctx := context.Background()
	st.Record(ctx, s, "k", 1) // the script is loaded
	if err := client.Do(ctx, "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := st.Record(ctx, s, "k", 1)
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("record during a pause: %v after %v, want a timeout", err, time.Since(start))
	}
	time.Sleep(400 * time.Millisecond)
	if u := usedOf(t, st, s, "k"); u[0] > 2 {
		t.Errorf("used %d: the timed-out script was replayed", u[0])
	}
	retrying := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer retrying.Close()
	if _, err := New(retrying, Options{}); err == nil || !strings.Contains(err.Error(), "MaxRetries") {
		t.Errorf("a client that retries commands: %v", err)
	}
	deaf := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer deaf.Close()
	if _, err := New(deaf, Options{}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Errorf("a client that ignores context deadlines: %v", err)
	}
}

func TestInvalidInputRefused(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{})
	ctx := context.Background()
	if _, err := New(srv.Client(), Options{Prefix: "a{b"}); err == nil {
		t.Error("prefix with a brace accepted")
	}
	sub := mustStrategy(t, strategy.Rule{Limit: 5, Window: 3 * time.Microsecond, Granularity: 1500 * time.Nanosecond})
	if err := st.Record(ctx, sub, "k", 1); err == nil || !strings.Contains(err.Error(), "whole microseconds") {
		t.Errorf("sub-microsecond granularity: %v", err)
	}
	ok := mustStrategy(t, strategy.Rule{Limit: 5, Window: time.Second})
	if err := st.Record(ctx, ok, "k", 0); !errors.Is(err, cache.ErrInvalidCount) {
		t.Errorf("count 0: %v", err)
	}
	st.Close()
	if err := st.Record(ctx, ok, "k", 1); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// steppingClock is a clock that a test can move backwards, as Redis TIME can move after an NTP
// step or a failover.
type steppingClock struct{ now atomic.Int64 }

func (c *steppingClock) Now() time.Time                                   { return time.Unix(0, c.now.Load()) }
func (c *steppingClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// TestPeekKeepsTime: after a peek has seen usage expire, a clock that steps back does not bring
// it back.
func TestPeekKeepsTime(t *testing.T) {
	srv := redistest.Start(t)
	clk := &steppingClock{}
	clk.now.Store(t0.UnixNano())
	st := newStore(t, srv.Client(), Options{Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 2, Window: 4 * time.Second})
	ctx := context.Background()
	if _, err := st.Reserve(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	clk.now.Store(t0.Add(4 * time.Second).UnixNano())
	if u := usedOf(t, st, s, "k"); u[0] != 0 {
		t.Fatalf("used at s+W: %d", u[0])
	}
	clk.now.Store(t0.UnixNano())
	if u := usedOf(t, st, s, "k"); u[0] != 0 {
		t.Errorf("used %d after the clock stepped back: the peek's time was not kept", u[0])
	}
}

func TestErrorsSayWhatHappened(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{})
	s := mustStrategy(t, strategy.Rule{Limit: 5, Window: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Reserve(ctx, s, "k", 1)
	if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled caller: %v", err)
	}
	srv.Stop()
	err = st.Record(context.Background(), s, "k", 1)
	if err == nil || !strings.Contains(err.Error(), srv.Addr) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Redis down: %v, want the address and the refused connection in the message", err)
	}
	// A day in 1 s buckets, asked for (the default for a day is 24 min, which Redis holds).
	day := mustStrategy(t, strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: time.Second})
	if err := st.Record(context.Background(), day, "k", 1); err == nil || !strings.Contains(err.Error(), "Granularity to at least 8.64s") {
		t.Errorf("a day at 1 s granularity: %v", err)
	}
	var nilClient *redis.Client
	if _, err := New(nilClient, Options{}); err == nil {
		t.Error("typed nil client accepted")
	}
}

func TestSyncPassesSyncSuite(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	storetest.Sync(t, newStore(t, srv.Client(), Options{Clock: clk}), clk)
}

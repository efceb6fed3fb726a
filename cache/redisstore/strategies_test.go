package redisstore

import (
	"context"
	"encoding/base64"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestAdmitMatchesSharedTable runs the shared admission table (fixed window, token bucket, rolling window, every
// figure of every Decision, rolling-window Reset included) through the three scripts.
func TestAdmitMatchesSharedTable(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(time.Unix(0, 0)) // the table sets instants from 12 000 s on
	storetest.Admit(t, newStore(t, srv.Client(), Options{Clock: clk}), clk)
}

// TestSameAsMemory drives the memory store (the strategies' own Go counters) and the Redis
// store with the same random operations under each strategy, on one manual clock, and requires
// identical answers: Admit, Reserve, Record, Release, Peek, and Sync under the rolling window.
func TestSameAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	algs := []engine.Algorithm{storetest.FixedWindow, storetest.TokenBucket, storetest.RollingWindow}
	var iteration atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewManual(t0.Add(time.Duration(rapid.Int64Range(0, 1e9).Draw(rt, "start µs")) * time.Microsecond))
		mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		red := newStore(t, client, Options{Clock: clk})
		defer red.Close()
		alg := algs[rapid.IntRange(0, len(algs)-1).Draw(rt, "alg")]
		units := []time.Duration{time.Microsecond, time.Millisecond, 100 * time.Millisecond}
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			g := units[rapid.IntRange(0, len(units)-1).Draw(rt, "unit")]
			if alg == storetest.RollingWindow && g == time.Microsecond {
				g = time.Millisecond // the rolling window's buckets are bounded
			}
			limit := rapid.IntRange(1, 20).Draw(rt, "limit")
			rules = append(rules, strategy.Rule{Limit: limit, Granularity: g,
				Window:   time.Duration(rapid.IntRange(1, 50).Draw(rt, "w")) * g * 10,
				Margin:   time.Duration(rapid.IntRange(0, 3).Draw(rt, "m")) * g,
				Headroom: rapid.IntRange(0, limit-1).Draw(rt, "h")})
		}
		s, err := engine.New(alg, rules...)
		if err != nil {
			rt.Skip(err) // e.g. a token bucket's odd window
		}
		key := "same-" + strconv.FormatInt(iteration.Add(1), 10)
		rolling := alg == storetest.RollingWindow
		storetest.Differential(rt, clk, mem, red, s, key, storetest.Ops{Admit: true, Sync: rolling})
	})
}

// TestTokenBucketExactness drives both stores to the edges of the token bucket's arithmetic:
// a debt of nearly 2^62 token·ns (Limit × Window at its bound, far past 2^53),
// monitoring that runs the debt into the bucket's cap (capacity × MaxWindow, and 2^63 − 1,
// which is not a whole µs), and refills by odd numbers of µs, so that waits land on every ns.
func TestTokenBucketExactness(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	ctx := context.Background()
	// W = 1 099 511 627 µs, limit 2^22: Limit × W = 4 611 686 015 973 376 000 token·ns, just
	// under 2^62.
	big := strategy.Rule{Limit: 1 << 22, Window: 1_099_511_627 * time.Microsecond, Granularity: time.Microsecond}
	if _, err := tokenbucket.New(big); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]strategy.Rule{
		"limit×window near 2^62": {big},
		"capped at 2^63−1":       {{Limit: 1000, Window: 24 * time.Hour}, {Limit: 7, Window: 3 * time.Second, Headroom: 2}},
		"capped at C×MaxWindow":  {{Limit: 3, Window: 7 * time.Microsecond, Granularity: time.Microsecond}},
		"capacity 2^31−1":        {{Limit: 2_147_483_647, Window: 2_147_483 * time.Microsecond, Granularity: time.Microsecond}},
	}
	var iteration atomic.Int64
	for name, rules := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := tokenbucket.New(rules...)
			if err != nil {
				t.Fatal(err)
			}
			rapid.Check(t, func(rt *rapid.T) {
				clk := clock.NewManual(t0)
				mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
				if err != nil {
					rt.Fatal(err)
				}
				defer mem.Close()
				red := newStore(t, client, Options{Clock: clk})
				defer red.Close()
				key := "exact-" + name + strconv.FormatInt(iteration.Add(1), 10)
				same := func(what string) {
					for _, n := range []int{0, 1, s.MaxBurst()} {
						a, err1 := mem.Peek(ctx, s, key, n)
						b, err2 := red.Peek(ctx, s, key, n)
						if err := errors.Join(err1, err2); err != nil {
							rt.Fatal(err)
						}
						if a.Wait != b.Wait {
							rt.Fatalf("%s: peek(%d) wait: memory %v, redis %v", what, n, a.Wait, b.Wait)
						}
						for i := range a.Usage {
							if a.Usage[i].Used != b.Usage[i].Used {
								rt.Fatalf("%s: rule %d used: memory %d, redis %d", what, i, a.Usage[i].Used, b.Usage[i].Used)
							}
						}
					}
				}
				for range rapid.IntRange(1, 30).Draw(rt, "ops") {
					switch rapid.IntRange(0, 4).Draw(rt, "op") {
					case 0: // from 1 µs to ~a year, in odd steps
						clk.Advance(time.Duration(rapid.Int64Range(1, 1<<45).Draw(rt, "µs")) * time.Microsecond)
					case 1:
						n := rapid.IntRange(1, storecheck.MaxCount).Draw(rt, "record")
						for range rapid.IntRange(1, 50).Draw(rt, "times") {
							if err := errors.Join(mem.Record(ctx, s, key, n), red.Record(ctx, s, key, n)); err != nil {
								rt.Fatal(err)
							}
						}
						same("record")
					case 2:
						n := rapid.IntRange(1, s.MaxBurst()).Draw(rt, "admit")
						a, err1 := mem.Admit(ctx, s, key, n)
						b, err2 := red.Admit(ctx, s, key, n)
						if err := errors.Join(err1, err2); err != nil {
							rt.Fatal(err)
						}
						if a.Allowed != b.Allowed || a.RetryAfter != b.RetryAfter || !a.At.Equal(b.At) {
							rt.Fatalf("admit %d: memory %+v, redis %+v", n, a, b)
						}
						for i := range a.Rules {
							if a.Rules[i] != b.Rules[i] {
								rt.Fatalf("admit %d, rule %d: memory %+v, redis %+v", n, i, a.Rules[i], b.Rules[i])
							}
						}
					case 3:
						n := rapid.IntRange(1, storecheck.MaxCount).Draw(rt, "release")
						if err := errors.Join(mem.Release(ctx, s, key, clk.Now(), n), red.Release(ctx, s, key, clk.Now(), n)); err != nil {
							rt.Fatal(err)
						}
						same("release")
					case 4:
						same("peek")
					}
				}
			})
		})
	}
}

// TestConcurrentAdmitsStopAtLimit: 16 goroutines × 200 admissions on one key, limit 1000 (Redis TIME):
// exactly 1000 admitted under each new strategy.
func TestConcurrentAdmitsStopAtLimit(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{Timeout: 5 * time.Second})
	// A window long enough that nothing refills or rolls over during the test, save the fixed
	// window's boundary, which the key is checked against below.
	rule := strategy.Rule{Limit: 1000, Window: 24 * time.Hour}
	fw, _ := fixedwindow.New(rule)
	tb, _ := tokenbucket.New(rule) // one token back every 86.4 s
	for name, s := range map[string]*engine.Strategy{"fixedwindow": fw, "tokenbucket": tb} {
		t.Run(name, func(t *testing.T) {
			var allowed, refused atomic.Int64
			var wg sync.WaitGroup
			ctx := context.Background()
			for range 16 {
				wg.Go(func() {
					for range 200 {
						d, err := st.Admit(ctx, s, "crowd", 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						} else {
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if allowed.Load() != 1000 || refused.Load() != 2200 {
				t.Errorf("allowed %d, refused %d of 3200; want exactly 1000 and 2200", allowed.Load(), refused.Load())
			}
			want := 1000 // the token bucket spends nothing on a refusal
			if name == "fixedwindow" {
				want = 3200 // the fixed window counts every attempt
			}
			if u := usedOf(t, st, s, "crowd"); u[0] != want {
				t.Errorf("used %d, want %d", u[0], want)
			}
		})
	}
}

// TestEveryKeyHasTTL: after every kind of operation under each strategy, on Redis TIME, every
// key in Redis has a TTL, and the TTLs are what the state needs (end of window or full bucket,
// plus slack).
func TestEveryKeyHasTTL(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	st := newStore(t, client, Options{CheckInterval: -1}) // no fleet key: only the scripts' keys are counted
	ctx := context.Background()
	fw, _ := fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}, strategy.Rule{Limit: 50, Window: time.Hour})
	tb, _ := tokenbucket.New(strategy.Rule{Limit: 5, Window: time.Minute}, strategy.Rule{Limit: 50, Window: time.Hour})
	rw, _ := rollingwindow.New(strategy.Rule{Limit: 5, Window: time.Minute})
	for _, s := range []*engine.Strategy{fw, tb, rw} {
		for _, key := range []string{"record", "reserve", "admit", "release"} {
			key = s.Name() + "-" + key
			switch {
			case strings.HasSuffix(key, "record"):
				st.Record(ctx, s, key, 7)
			case strings.HasSuffix(key, "reserve"):
				st.Reserve(ctx, s, key, 2)
			case strings.HasSuffix(key, "admit"):
				for range 7 {
					if _, err := st.Admit(ctx, s, key, 1); err != nil {
						t.Fatal(err)
					}
				}
			default:
				res, _ := st.Reserve(ctx, s, key, 5)
				st.Release(ctx, s, key, res.At, 5)
			}
			if _, err := st.Peek(ctx, s, key, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, err := client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4+4+4 {
		t.Errorf("%d keys, want one per key and strategy: %v", len(all), all)
	}
	for _, k := range all {
		ttl, err := client.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 {
			t.Errorf("%q: PTTL %v, %v; want a TTL", k, ttl, err)
			continue
		}
		// Each key holds both rules (the rolling window's one): its TTL is the longest need.
		switch {
		case strings.HasSuffix(k, ":fw1") && ttl > time.Hour+time.Second:
			t.Errorf("%q: TTL %v is longer than the hour window plus slack", k, ttl)
		case strings.HasSuffix(k, ":rw1") && ttl > time.Minute+time.Second:
			t.Errorf("%q: TTL %v is longer than the window plus slack", k, ttl)
		case strings.HasSuffix(k, ":tb1") && strings.Contains(k, base64.RawURLEncoding.EncodeToString([]byte("tokenbucket-release"))) && ttl > 2*time.Second:
			// a bucket given back whole is full: it is kept for the slack only
			t.Errorf("%q: TTL %v for a full bucket, want the slack", k, ttl)
		case strings.HasSuffix(k, ":tb1") && ttl > 7*72*time.Second+time.Second:
			t.Errorf("%q: TTL %v is longer than the time to refill plus slack", k, ttl)
		}
	}
	// The token bucket's TTL is the time until it is full: 7 spent, of 50 per hour → 504 s
	// (of 5 per minute, 84 s, the shorter).
	if ttl := client.PTTL(ctx, st.Keys(tb, "tokenbucket-record")[0]).Val(); ttl < 503*time.Second || ttl > 505*time.Second {
		t.Errorf("bucket 7 tokens in debt at 5 per minute and 50 per hour: TTL %v, want about 504 s + slack", ttl)
	}
}

// TestValidateRefusesWhatScriptsCannotHold: the bounds the scripts need, and Sync's refusal.
func TestValidateRefusesWhatScriptsCannotHold(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{})
	ctx := context.Background()
	micro := func(limit int) strategy.Rule {
		return strategy.Rule{Limit: limit, Window: time.Microsecond, Granularity: time.Microsecond}
	}
	// The cap of a 1 µs bucket is capacity × MaxWindow / 1 µs whole tokens: 28 × 3.15e14 <
	// 2^53 ≤ 29 × 3.15e14.
	ok, _ := tokenbucket.New(micro(28))
	if err := st.validate(ok); err != nil {
		t.Errorf("1 µs bucket of 28: %v", err)
	}
	tooMany, _ := tokenbucket.New(micro(29))
	if err := st.validate(tooMany); err == nil || !strings.Contains(err.Error(), "2^53") {
		t.Errorf("1 µs bucket of 29: %v, want a refusal naming 2^53", err)
	}
	if q := int64(29) * int64(strategy.MaxWindow/time.Microsecond); q < maxBucketTokens {
		t.Fatalf("the boundary moved: %d", q)
	}
	twoMicros, _ := tokenbucket.New(strategy.Rule{Limit: 1 << 20, Window: 2 * time.Microsecond, Granularity: time.Microsecond})
	if err := st.validate(twoMicros); err != nil {
		t.Errorf("2 µs bucket of 2^20 (cap 2^63−1): %v", err)
	}
	odd, err := tokenbucket.Rule(10, 3) // 10 tokens at 3 per second: 3.333333334 s
	if err != nil {
		t.Fatal(err)
	}
	oddS, _ := tokenbucket.New(odd)
	if err := st.validate(oddS); err == nil || !strings.Contains(err.Error(), "whole microseconds") {
		t.Errorf("a window in ns: %v", err)
	}
	wide, _ := tokenbucket.New(strategy.Rule{Limit: storecheck.MaxCount + 1, Window: time.Second})
	if err := st.validate(wide); err == nil {
		t.Error("capacity above MaxCount accepted")
	}
	fwOdd, _ := fixedwindow.New(strategy.Rule{Limit: 5, Window: 1500 * time.Nanosecond, Granularity: 1500 * time.Nanosecond})
	if err := st.validate(fwOdd); err == nil || !strings.Contains(err.Error(), "whole microseconds") {
		t.Errorf("a fixed window in ns: %v", err)
	}
	fw, _ := fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Second})
	tb, _ := tokenbucket.New(strategy.Rule{Limit: 5, Window: time.Second})
	for _, s := range []*engine.Strategy{fw, tb} {
		if err := st.validate(s); err != nil {
			t.Errorf("%s: %v", s.Name(), err)
		}
		if err := st.Sync(ctx, s, "k", engine.Update{Pause: time.Second}); !errors.Is(err, errSyncUnsupported) {
			t.Errorf("%s: Sync = %v, want errSyncUnsupported", s.Name(), err)
		}
		if _, err := st.Admit(ctx, s, "k", 6); !errors.Is(err, strategy.ErrBurstTooLarge) {
			t.Errorf("%s: admit 6 of 5: %v", s.Name(), err)
		}
	}
	if math.MaxInt64/int64(strategy.MaxWindow) != 29 {
		t.Fatal("the cap's formula changed")
	}
}

// TestTokenBucketCapExactToNanosecond: monitoring runs a 1000-per-day bucket into tokenbucket's cap of
// 2^63 − 1 token·ns, which is not a whole µs: the script keeps it as q whole tokens, r µs and
// s = 807 ns beyond them, and answers to the ns as the Go bucket does.
func TestTokenBucketCapExactToNanosecond(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	ctx := context.Background()
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red := newStore(t, client, Options{Clock: clk})
	s, _ := tokenbucket.New(strategy.Rule{Limit: 1000, Window: 24 * time.Hour})
	for range 3 {
		if err := errors.Join(mem.Record(ctx, s, "cap", storecheck.MaxCount), red.Record(ctx, s, "cap", storecheck.MaxCount)); err != nil {
			t.Fatal(err)
		}
	}
	w := int64(24 * time.Hour)
	v, _ := readValue(t, client, red, s, "cap")
	state := v.slots[s.CounterID(0)] // hw, q, r, s
	if q, r := math.MaxInt64/w, math.MaxInt64%w/1000; len(state) != 4 || state[1] != q || state[2] != r || state[3] != 807 {
		t.Fatalf("capped state %v, want q %d, r %d, s 807", state, q, r)
	}
	compare := func(what string) {
		t.Helper()
		a, err1 := mem.Admit(ctx, s, "cap", 1000)
		b, err2 := red.Admit(ctx, s, "cap", 1000)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if a.Allowed != b.Allowed || a.RetryAfter != b.RetryAfter || a.Rules[0] != b.Rules[0] {
			t.Fatalf("%s: memory %+v, redis %+v", what, a, b)
		}
	}
	compare("at the cap")
	// The bucket is full ceil((2^63 − 1) / 1000) ns after the cap: 9 223 372 036 854 776 ns,
	// that is 9 223 372 036 854 µs and 776 ns; both stores agree on every step up to it.
	full := time.Duration((math.MaxInt64-1)/1000 + 1)
	a, _ := red.Admit(ctx, s, "cap", 1)
	if a.Allowed || a.Rules[0].Reset != full || a.RetryAfter != full-time.Duration(999)*time.Duration(w)/1000 {
		t.Errorf("reset %v (want %v), retry %v", a.Rules[0].Reset, full, a.RetryAfter)
	}
	last := full.Truncate(time.Microsecond) - 17*time.Hour - 2*time.Microsecond
	for _, step := range []time.Duration{time.Microsecond, 17 * time.Hour, last, time.Microsecond, time.Microsecond} {
		clk.Advance(step)
		compare("after " + step.String())
	}
}

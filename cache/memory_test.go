package cache

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storecheck"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_800_000_000, 0)

func newMemory(t testing.TB, cfg MemoryConfig) *Memory {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = clock.NewManual(t0)
	}
	m, err := NewMemory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var (
	mustStrategy = storetest.Strategy
	used         = func(t testing.TB, st Store, s *engine.Strategy, key string) []int {
		return storetest.Used(t, st, s, key)
	}
)

// TestNoLostCounts: 32 goroutines × 10 000 records on one key and on 1 000 keys; every count
// is there at the end.
func TestNoLostCounts(t *testing.T) {
	const goroutines, each = 32, 10_000
	s := mustStrategy(t, strategy.Rule{Limit: 1, Window: time.Hour}, strategy.Rule{Limit: 1, Window: 24 * time.Hour})
	for _, keys := range []int{1, 1000} {
		t.Run(strconv.Itoa(keys)+" keys", func(t *testing.T) {
			m := newMemory(t, MemoryConfig{})
			ctx := context.Background()
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						key := "tenant-" + strconv.Itoa((g*each+i)%keys)
						if err := m.Record(ctx, s, key, 1); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			total := 0
			for k := range keys {
				u := used(t, m, s, "tenant-"+strconv.Itoa(k))
				if u[0] != u[1] {
					t.Fatalf("key %d: hour %d ≠ day %d", k, u[0], u[1])
				}
				if want := goroutines * each / keys; u[0] != want {
					t.Errorf("key %d: used %d, want %d", k, u[0], want)
				}
				total += u[0]
			}
			if total != goroutines*each {
				t.Errorf("total %d, want %d", total, goroutines*each)
			}
			if st := m.Stats(); st != (MemoryStats{}) {
				t.Errorf("stats %+v, want none", st)
			}
		})
	}
}

// TestNewKeyReadableRightAfterRecord: a new key is readable the moment Record returns (ristretto
// buffers new keys; the store must not).
func TestNewKeyReadableRightAfterRecord(t *testing.T) {
	m := newMemory(t, MemoryConfig{})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	for i := range 2000 {
		key := "k" + strconv.Itoa(i)
		if err := m.Record(context.Background(), s, key, 1); err != nil {
			t.Fatal(err)
		}
		if u := used(t, m, s, key); u[0] != 1 {
			t.Fatalf("key %s: used %d right after recording, want 1", key, u[0])
		}
	}
	if u := used(t, m, s, ""); u[0] != 0 {
		t.Fatalf("empty key used %d", u[0])
	}
	if err := m.Record(context.Background(), s, "", 2); err != nil {
		t.Fatal(err)
	}
	if u := used(t, m, s, ""); u[0] != 2 {
		t.Fatalf("the empty key is a key like any other: used %d, want 2", u[0])
	}
}

// TestConcurrentReservesNeverExceedLimit: concurrent reservations never admit more than the limit.
func TestConcurrentReservesNeverExceedLimit(t *testing.T) {
	m := newMemory(t, MemoryConfig{})
	s := mustStrategy(t, strategy.Rule{Limit: 1000, Window: time.Minute}, strategy.Rule{Limit: 1500, Window: time.Hour})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 100 {
				res, err := m.Reserve(context.Background(), s, "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				} else if res.Wait != time.Minute {
					t.Errorf("refused with wait %v, want 1m", res.Wait)
					return
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 1000 {
		t.Errorf("allowed %d, want exactly 1000", allowed.Load())
	}
	if u := used(t, m, s, "k"); u[0] != 1000 || u[1] != 1000 {
		t.Errorf("used %v, want [1000 1000]", u)
	}
	if _, err := m.Reserve(context.Background(), s, "k", 1001); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("reserve 1001: %v", err)
	}
}

// TestSameWindowRulesShareOneCount: two strategies that layer the same window on a key share its
// count.
func TestSameWindowRulesShareOneCount(t *testing.T) {
	m := newMemory(t, MemoryConfig{})
	minute := strategy.Rule{Limit: 60, Window: time.Minute}
	a := mustStrategy(t, minute)
	b := mustStrategy(t, minute, strategy.Rule{Limit: 5000, Window: 24 * time.Hour})
	ctx := context.Background()
	_ = m.Record(ctx, a, "t", 10)
	_ = m.Record(ctx, b, "t", 5)
	if u := used(t, m, a, "t"); u[0] != 15 {
		t.Errorf("minute seen by a: %d, want 15", u[0])
	}
	if u := used(t, m, b, "t"); u[0] != 15 || u[1] != 5 {
		t.Errorf("b sees %v, want [15 5]: the day rule counts only b's requests, once", u)
	}
}

// TestEvictionIsNeverSilent: with a store far too small, every key written is either counted,
// refused with ErrFull, or reported as evicted.
func TestEvictionIsNeverSilent(t *testing.T) {
	var mu sync.Mutex
	evicted := map[string]bool{}
	m := newMemory(t, MemoryConfig{MaxCost: 8 << 10, MaxKeys: 100, OnEvictLive: func(k string) {
		mu.Lock()
		evicted[k] = true
		mu.Unlock()
	}})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	refused := map[string]bool{}
	const keys = 2000
	for i := range keys {
		key := "k" + strconv.Itoa(i)
		err := m.Record(context.Background(), s, key, 1)
		if errors.Is(err, ErrFull) {
			refused[key] = true
		} else if err != nil {
			t.Fatal(err)
		}
	}
	m.client.Wait()
	mu.Lock()
	reported := maps.Clone(evicted)
	mu.Unlock()
	counted := 0
	for i := range keys {
		key := "k" + strconv.Itoa(i)
		u := used(t, m, s, key)[0]
		switch {
		case u == 1:
			counted++
		case refused[key] || reported[key]:
		default:
			t.Fatalf("key %s: used %d, neither refused nor reported evicted: a silent undercount", key, u)
		}
	}
	st := m.Stats()
	if st.EvictedLive == 0 && st.Rejected == 0 {
		t.Fatalf("8 KiB cannot hold %d keys, yet nothing was evicted or refused", keys)
	}
	if int(st.EvictedLive) != len(reported) || int(st.Rejected) != len(refused) {
		t.Errorf("stats %+v, callbacks %d, refusals %d", st, len(reported), len(refused))
	}
	t.Logf("counted %d, refused %d, evicted live %d", counted, len(refused), len(reported))
}

// TestExpiredStateIsNotReported: dropping a key whose windows have all passed is no loss.
func TestExpiredStateIsNotReported(t *testing.T) {
	clk := clock.NewManual(t0)
	m := newMemory(t, MemoryConfig{MaxCost: 8 << 10, MaxKeys: 100, Clock: clk})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	for i := range 2000 {
		at := t0.Add(time.Duration(i) * time.Minute) // each key's state is dead before the next is written
		clk.Set(at)
		err := m.Record(context.Background(), s, "k"+strconv.Itoa(i), 1)
		if err != nil && !errors.Is(err, ErrFull) {
			t.Fatal(err)
		}
	}
	m.client.Wait()
	if st := m.Stats(); st.EvictedLive != 0 {
		t.Errorf("%d expired keys reported as live evictions", st.EvictedLive)
	}
}

// TestNegativeMaxCostRefused: NewMemory refuses a negative MaxCost.
func TestNegativeMaxCostRefused(t *testing.T) {
	if _, err := NewMemory(MemoryConfig{MaxCost: -1}); err == nil {
		t.Error("negative MaxCost accepted")
	}
}

// TestPeekDuringFirstRecordCountsOnce: reads that land between a key's admission and its first
// count must not race with it (gocache formats the stored value into its errors).
func TestPeekDuringFirstRecordCountsOnce(t *testing.T) {
	m := newMemory(t, MemoryConfig{})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	for k := range 300 {
		key := "tenant-" + strconv.Itoa(k)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			if err := m.Record(ctx, s, key, 1); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			<-start
			for range 200 {
				if snap, _ := m.Peek(ctx, s, key, 1); snap.Usage[0].Used > 0 {
					return
				}
			}
		})
		close(start)
		wg.Wait()
		if u := used(t, m, s, key); u[0] != 1 {
			t.Fatalf("%s: used %d, want 1", key, u[0])
		}
	}
}

// TestReserveNeverOvershootsRealClock: goroutines reserving on the real clock. The instants the
// store granted (Result.At) must never put more than the limit in any window: the store reads
// the clock under the key's lock, so a caller that lost the race for the lock cannot be judged
// at an instant earlier than one already applied. The goroutines reserve until 5 windows' worth
// has been granted (about 500 ms on an idle machine), so that the grants span several windows;
// how long that takes depends on the machine's load, so the only bound on it is a generous
// deadline (liveness: the key keeps admitting), not a rate.
func TestReserveNeverOvershootsRealClock(t *testing.T) {
	const limit, window = 20, 100 * time.Millisecond
	const want, deadline = 5 * limit, time.Minute
	m := newMemory(t, MemoryConfig{Clock: clock.Real()})
	s := mustStrategy(t, strategy.Rule{Limit: limit, Window: window, Granularity: 10 * time.Millisecond})
	var mu sync.Mutex
	var granted []time.Time
	begin := time.Now()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				mu.Lock()
				enough := len(granted) >= want
				mu.Unlock()
				if enough || time.Since(begin) > deadline {
					return
				}
				res, err := m.Reserve(context.Background(), s, "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					mu.Lock()
					granted = append(granted, res.At)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	slices.SortFunc(granted, func(a, b time.Time) int { return a.Compare(b) })
	for i := range granted {
		j := i
		for j < len(granted) && granted[j].Sub(granted[i]) < window {
			j++
		}
		if j-i > limit {
			t.Fatalf("%d reservations within %v of %v, limit %d", j-i, window, granted[i], limit)
		}
	}
	if len(granted) < want {
		t.Fatalf("only %d reservations in %v at %d per %v, want %d: the key stopped admitting", len(granted), took.Round(time.Millisecond), limit, window, want)
	}
	t.Logf("%d reservations in %v at %d per %v", len(granted), took.Round(time.Millisecond), limit, window)
}

// TestInvalidCountsRefused: counts below 1 or above storecheck.MaxCount are ErrInvalidCount and change
// nothing; a MaxKeys past 2^40 is refused, saying so.
func TestInvalidCountsRefused(t *testing.T) {
	m := newMemory(t, MemoryConfig{})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	for _, n := range []int{0, -5, storecheck.MaxCount + 1} {
		if err := m.Record(context.Background(), s, "k", n); !errors.Is(err, ErrInvalidCount) {
			t.Errorf("Record(%d): %v", n, err)
		}
		if err := m.Release(context.Background(), s, "k", t0, n); !errors.Is(err, ErrInvalidCount) {
			t.Errorf("Release(%d): %v", n, err)
		}
	}
	if u := used(t, m, s, "k"); u[0] != 0 {
		t.Errorf("invalid counts changed usage to %d", u[0])
	}
	if _, err := NewMemory(MemoryConfig{MaxKeys: 1 << 62}); err == nil || !strings.Contains(err.Error(), "MaxKeys") {
		t.Errorf("huge MaxKeys: %v", err)
	}
}

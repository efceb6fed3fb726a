package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// info returns field k of INFO section on c.
func info(t *testing.T, c *redis.Client, section, k string) string {
	t.Helper()
	s, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	return infoFields(s)[k]
}

// lostEvents returns rec's StateLost events of reason.
func lostEvents(rec *observetest.Recorder, reason string) []observe.Event {
	var out []observe.Event
	for _, e := range rec.Events() {
		if e.Kind == observe.StateLost && e.Op == reason {
			out = append(out, e)
		}
	}
	return out
}

// waitFor polls cond every 5 ms for up to 30 s: what it waits for takes a check interval or
// two on an idle machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}

// TestEvictionReported: under allkeys-lru with AllowEviction, a flood that makes Redis evict
// is reported as StateLost "eviction" events, within 2 check intervals on an idle machine
// (asserted within 20: the checks run on the real clock); their N add up to INFO's
// evicted_keys exactly. (The metrics module's TestEvictionCounted checks that its counter
// counts each event.)
func TestEvictionReported(t *testing.T) {
	srv := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	c := srv.Client()
	rec := &observetest.Recorder{}
	const interval = 200 * time.Millisecond
	st := newStore(t, c, Options{AllowEviction: true, CheckInterval: interval, Observer: rec})
	defer st.Close()
	waitFor(t, "first check", func() bool { return st.Processes() == 1 })
	ctx := context.Background()
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	for i := range 100 {
		if err := st.Record(ctx, s, "tenant-"+strconv.Itoa(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	value := strings.Repeat("x", 10_000)
	for batch := 0; info(t, c, "stats", "evicted_keys") == "0"; batch++ {
		if batch == 100 {
			t.Fatal("no eviction after 100 batches of 1 MB")
		}
		p := c.Pipeline()
		for i := range 100 {
			p.Set(ctx, fmt.Sprintf("flood-%d-%d", batch, i), value, time.Hour)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	flooded := time.Now()
	waitFor(t, "eviction event", func() bool { return len(lostEvents(rec, "eviction")) > 0 })
	took := time.Since(flooded)
	t.Logf("eviction reported %v after the flood ended (interval %v)", took.Round(time.Millisecond), interval)
	if took > 20*interval {
		t.Errorf("eviction reported after %v, want within 2 intervals (%v), 20 on a loaded machine", took, 2*interval)
	}
	// Redis may go on evicting after the flood (eviction runs in steps, and the heartbeat
	// writes), and a check may come late on a loaded machine: compare once evicted_keys held
	// still over 2 intervals and the events' N caught up with it, or, 30 s on, with what they
	// add up to then.
	var evs []observe.Event
	var sum, evicted int
	for deadline := time.Now().Add(30 * time.Second); ; {
		before := info(t, c, "stats", "evicted_keys")
		time.Sleep(2 * interval)
		evs = lostEvents(rec, "eviction")
		sum = 0
		for _, e := range evs {
			sum += e.N
		}
		after := info(t, c, "stats", "evicted_keys")
		evicted, _ = strconv.Atoi(after)
		if after == before && sum == evicted {
			break
		}
		if time.Now().After(deadline) {
			if after != before {
				t.Fatal("Redis still evicting 30 s after the flood")
			}
			break // the events' N are compared below
		}
	}
	for _, e := range evs {
		if e.Store != "redis" || e.N <= 0 || !strings.HasPrefix(e.Err.Error(), "redis at "+srv.Addr+" evicted "+strconv.Itoa(e.N)+" keys") {
			t.Errorf("event %v", e)
		}
	}
	if sum != evicted {
		t.Errorf("events' N add up to %d, INFO evicted_keys %d", sum, evicted)
	}
	t.Logf("%d keys evicted, %d events, first: %v", evicted, len(evs), evs[0].Err)
}

// TestRestartReported: a restart of Redis is one StateLost "restart" event, naming the
// address and both run IDs; without persistence every count is said lost, and with it the
// keys it loaded are said.
func TestRestartReported(t *testing.T) {
	for _, persist := range []bool{false, true} {
		var args []string
		if persist {
			args = []string{"--dir", t.TempDir(), "--dbfilename", "dump.rdb"}
		}
		srv := redistest.StartWith(t, args...)
		c := srv.Client()
		rec := &observetest.Recorder{}
		const interval = minCheckInterval
		st := newStore(t, c, Options{CheckInterval: interval, Observer: rec})
		waitFor(t, "first check", func() bool { return st.Processes() == 1 })
		ctx := context.Background()
		if err := st.Record(ctx, mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute}), "k", 1); err != nil {
			t.Fatal(err)
		}
		if persist {
			if err := c.Save(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		before := info(t, c, "server", "run_id")
		srv.Restart()
		after := info(t, c, "server", "run_id")
		waitFor(t, "restart event", func() bool { return len(lostEvents(rec, "restart")) > 0 })
		time.Sleep(10 * interval)
		lost := "the counts kept there are lost (it loaded no persistence file)"
		if persist {
			// The key's one Redis key, and the fleet set unless its TTL (3 intervals) ran out
			// before the load (then counted in rdb_last_load_keys_expired).
			n := info(t, c, "persistence", "rdb_last_load_keys_loaded")
			if exp := info(t, c, "persistence", "rdb_last_load_keys_expired"); n+"+"+exp != "2+0" && n+"+"+exp != "1+1" {
				t.Errorf("loaded %s keys, %s expired; want 2 and 0, or 1 and 1", n, exp)
			}
			lost = "it loaded " + n + " keys from its persistence file (aof_enabled:0), so the counts kept there since its last save are lost"
		}
		want := []string{"state_lost store=redis op=restart key= err=redis at " + srv.Addr + " restarted (run ID " + before + " → " + after + "): " + lost}
		if got := rec.Strings(); !slices.Equal(got, want) {
			t.Errorf("persistence %v: events\n%q\nwant\n%q", persist, got, want)
		}
		t.Logf("%s", want[0])
		st.Close()
	}
}

// TestProcessesCountedByHeartbeat: three stores over one server and prefix count 3, and 2 once one is closed;
// a store whose server never answered counts 0; another prefix is another fleet.
func TestProcessesCountedByHeartbeat(t *testing.T) {
	srv := redistest.Start(t)
	const interval = minCheckInterval
	var sts []*Store
	for range 3 {
		sts = append(sts, newStore(t, srv.Client(), Options{CheckInterval: interval}))
	}
	other := newStore(t, srv.Client(), Options{CheckInterval: interval, Prefix: "other"})
	defer other.Close()
	downClient := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer downClient.Close()
	down := newStore(t, downClient, Options{CheckInterval: interval})
	defer down.Close()
	counts := func() []int {
		var n []int
		for _, st := range sts {
			n = append(n, st.Processes())
		}
		return n
	}
	waitFor(t, "3 processes", func() bool { return slices.Equal(counts(), []int{3, 3, 3}) })
	waitFor(t, "other prefix", func() bool { return other.Processes() == 1 })
	sts[2].Close()
	sts = sts[:2]
	waitFor(t, "2 processes", func() bool { return slices.Equal(counts(), []int{2, 2}) })
	if n, err := srv.Client().ZCard(context.Background(), "ratemonitor:{fleet}").Result(); err != nil || n != 2 {
		t.Errorf("fleet set holds %d (%v), want 2", n, err)
	}
	if n := down.Processes(); n != 0 {
		t.Errorf("unreachable store: %d processes, want 0", n)
	}
	for _, st := range sts {
		st.Close()
	}
	if n, err := srv.Client().Exists(context.Background(), "ratemonitor:{fleet}").Result(); err != nil || n != 0 {
		t.Errorf("fleet set exists %d (%v) after every Close, want 0", n, err)
	}
	if off := newStore(t, srv.Client(), Options{CheckInterval: -1}); off.Processes() != 0 || off.mon != nil {
		t.Errorf("CheckInterval -1: Processes %d, monitor %v", off.Processes(), off.mon)
	}
}

// TestMonitorStops: after Close no goroutine of the store is left; a store never closed stops
// checking once its client is closed, or once nothing refers to it (runtime.AddCleanup).
func TestMonitorStops(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	base := goleak.IgnoreCurrent()
	st := newStore(t, c, Options{CheckInterval: minCheckInterval})
	waitFor(t, "first check", func() bool { return st.Processes() == 1 })
	time.Sleep(20 * time.Millisecond)
	st.Close()
	goleak.VerifyNone(t, base)

	c2 := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	open := newStore(t, c2, Options{CheckInterval: minCheckInterval})
	waitFor(t, "first check", func() bool { return open.Processes() == 1 })
	c2.Close()
	stopped := func(m *monitor) func() bool {
		return func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.stopped
		}
	}
	waitFor(t, "monitor stopped after the client closed", stopped(open.mon))

	dropped := newStore(t, c, Options{CheckInterval: minCheckInterval}).mon
	waitFor(t, "monitor stopped once its store is garbage", func() bool { runtime.GC(); return stopped(dropped)() })
	dropped.running.Wait()
	goleak.VerifyNone(t, base)
}

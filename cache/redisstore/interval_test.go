package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
)

// TestCheckIntervalBelowMinimumRefused (regression, issue 14): Options.CheckInterval used to accept any
// positive duration, so CheckInterval: 1 (a nanosecond: "1" meant as a second, say) ran the
// loss check and the heartbeat back to back, and each heartbeat lasted 1 ms, so two Stores
// on one server rarely saw each other. New now refuses 0 < CheckInterval < minCheckInterval
// with an error that says what to give; at minCheckInterval, two Stores make at most 66 INFO
// calls a second (each: at most 11 checks of 3 INFO in 1 s; counted over the time that
// really passed, which a loaded machine stretches) and see each other (within 30 s).
func TestCheckIntervalBelowMinimumRefused(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	for _, d := range []time.Duration{1, time.Millisecond, minCheckInterval - 1} {
		st, err := New(c, Options{CheckInterval: d})
		want := fmt.Sprintf("ratemonitor: redis store: CheckInterval %v is too short: give 100ms or more (the default, 0, is 1s), or a negative one to turn the checks off", d)
		if err == nil || err.Error() != want || st != nil {
			t.Errorf("CheckInterval %v: store returned %v, error %v; want\n%s", d, st != nil, err, want)
		}
	}
	ctx := context.Background()
	a := newStore(t, c, Options{CheckInterval: minCheckInterval})
	defer a.Close()
	b := newStore(t, srv.Client(), Options{CheckInterval: minCheckInterval})
	defer b.Close()
	waitFor(t, "each store counting 2 processes", func() bool { return a.Processes() == 2 && b.Processes() == 2 })
	c.ConfigResetStat(ctx)
	reset := time.Now()
	time.Sleep(time.Second)
	stats := c.Info(ctx, "commandstats").Val()
	elapsed := time.Since(reset)
	var info, evalsha string
	for _, l := range strings.Split(stats, "\n") {
		if strings.HasPrefix(l, "cmdstat_info:") {
			info = strings.TrimSpace(l)
		}
		if strings.HasPrefix(l, "cmdstat_evalsha:") {
			evalsha = strings.TrimSpace(l)
		}
	}
	pa, pb := a.Processes(), b.Processes()
	t.Logf("in %v with CheckInterval %v: %s; %s; Processes() a=%d b=%d", elapsed.Round(time.Millisecond), minCheckInterval, info, evalsha, pa, pb)
	var calls int
	fmt.Sscanf(strings.TrimPrefix(info, "cmdstat_info:"), "calls=%d", &calls)
	if most := 2 * 3 * (int(elapsed/minCheckInterval) + 1); calls > most || pa != 2 || pb != 2 {
		t.Errorf("CheckInterval %v: %d INFO calls in %v from two Stores (at most %d); Processes() a=%d b=%d, want 2", minCheckInterval, calls, elapsed.Round(time.Millisecond), most, pa, pb)
	}
}

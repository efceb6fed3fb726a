package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestStrategiesSharingKeyCountOnce: two strategies of one algorithm on one logical key (a Transport's rules and
// another's over the same store) share its one Redis key, and the counter they have in common
// is counted once for both (docs/reliability.md, the conformance suite). A = {10/1m}, B = {100/1h, 10/1m} (the shared rule
// second, so B's slots are in another order): 3 recorded by A, then 2 by B, then 1 by A: A
// counts 6; B counts 2 and 6; the key holds the two counters, each once; its TTL covers the
// hour counter although A, which does not know it, wrote last (the window, or for the token
// bucket the 72 s until 2 of 100 per hour refill, where the minute's 6 of 10 take 36 s); and a
// peek by A leaves B's hour counter as it was.
func TestStrategiesSharingKeyCountOnce(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	minute := strategy.Rule{Limit: 10, Window: time.Minute}
	hour := strategy.Rule{Limit: 100, Window: time.Hour, Granularity: time.Minute}
	for _, a := range []struct {
		name string
		mk   func(...strategy.Rule) (*engine.Strategy, error)
		ttl  time.Duration // at least
	}{{"rollingwindow", rollingwindow.New, 59 * time.Minute}, {"fixedwindow", fixedwindow.New, 59 * time.Minute}, {"tokenbucket", tokenbucket.New, 71 * time.Second}} {
		t.Run(a.name, func(t *testing.T) {
			A, err := a.mk(minute)
			if err != nil {
				t.Fatal(err)
			}
			B, err := a.mk(hour, minute)
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewManual(t0)
			st := newStore(t, c, Options{Clock: clk})
			const key = "shared"
			if st.Keys(A, key)[0] != st.Keys(B, key)[0] {
				t.Fatalf("keys %q and %q, want one", st.Keys(A, key), st.Keys(B, key))
			}
			for _, step := range []struct {
				s *engine.Strategy
				n int
			}{{A, 3}, {B, 2}} {
				if err := st.Record(ctx, step.s, key, step.n); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Record(ctx, A, key, 1); err != nil {
				t.Fatal(err)
			}
			if u := usedOf(t, st, A, key); u[0] != 6 {
				t.Errorf("A counts %v, want [6]", u)
			}
			if u := usedOf(t, st, B, key); u[0] != 2 || u[1] != 6 {
				t.Errorf("B counts %v, want [2 6]", u)
			}
			v, _ := readValue(t, c, st, B, key)
			if len(v.ids) != 2 || v.ids[0] == v.ids[1] {
				t.Errorf("the key holds counters %q, want the two, once each", v.ids)
			}
			before := v.slots[B.CounterID(0)]
			if _, err := st.Peek(ctx, A, key, 1); err != nil {
				t.Fatal(err)
			}
			if v, _ := readValue(t, c, st, B, key); !equal(v.slots[B.CounterID(0)], before) {
				t.Errorf("B's hour counter after A's peek: %v, want %v as before", v.slots[B.CounterID(0)], before)
			}
			if ttl := c.PTTL(ctx, st.Keys(A, key)[0]).Val(); ttl < a.ttl {
				t.Errorf("TTL %v after A wrote last, want the hour counter's (at least %v)", ttl, a.ttl)
			}
		})
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// offset returns the clock offset (µs) key's value holds under s, "" when it is 0 or the key is
// absent: the key's one Redis key carries it for all of its slots.
func offset(t *testing.T, c *redis.Client, st *Store, s *engine.Strategy, key string) string {
	t.Helper()
	v, ok := readValue(t, c, st, s, key)
	if !ok || v.off == 0 {
		return ""
	}
	if len(v.ids) != s.Slots() {
		t.Errorf("key %q holds slots %q, want the strategy's %d", key, v.ids, s.Slots())
	}
	return strconv.FormatInt(v.off, 10)
}

// TestSteppedBackKeyRebasedOnItsOffset: issue 13, defect 4, in the scripts' own terms: a key whose clock steps back
// by more than engine.StepTolerance gets a clock offset (µs) in its value, so that
// its instant (TIME + offset) continues from its latest one. Two rules (10 per 10 s, 15 per
// minute, so two slots), 10 reserved at T, a whole number of minutes + 10 s:
//   - stepped back 1 h, a Reserve of 1 is refused with the wait it would have had at T (10 s;
//     the token bucket refills one of rule A's tokens in 1 s), and that refusal writes the
//     offset, 3 600 000 000 µs, to the key (for both slots); its TTL stays on Redis's clock (at most the
//     minute rule's window + slack, not an hour more);
//   - half the wait later the wait is exactly the other half and the offset has not drifted;
//     after it the Reserve is granted, At on the key's timeline (T + the wait), and a Release
//     of that At takes it back;
//   - a fresh key stepped back 0.5 s, then 1 s (exactly the tolerance), is not rebased (no
//     offset; usage unchanged) and its waits grow by the step, so that sleeping them is
//     enough; 1 µs further it is rebased (offset 1 000 001 µs) and the wait is the one at its
//     latest instant again. The boundary is engine.StepTolerance, which run passes.
//
// Before the offset, the second Reserve was refused again (the key stayed at T while the clock
// ran an hour behind it) and no offset was written.
func TestSteppedBackKeyRebasedOnItsOffset(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	T := t0.Add(10 * time.Second) // t0 is a whole number of minutes
	rules := []strategy.Rule{{Limit: 10, Window: 10 * time.Second}, {Limit: 15, Window: time.Minute}}
	for _, a := range []struct {
		name string
		mk   func(...strategy.Rule) (*engine.Strategy, error)
		wait time.Duration // for 1 more, just after 10 at T
	}{
		{"rollingwindow", rollingwindow.New, 10 * time.Second},
		{"fixedwindow", fixedwindow.New, 10 * time.Second},
		{"tokenbucket", tokenbucket.New, time.Second},
	} {
		t.Run(a.name, func(t *testing.T) {
			s, err := a.mk(rules...)
			if err != nil {
				t.Fatal(err)
			}
			clk := &storetest.SteppedClock{Base: clock.NewManual(T)}
			st := newStore(t, c, Options{Clock: clk})
			reserve := func(key string, n int) engine.Result {
				t.Helper()
				res, err := st.Reserve(ctx, s, key, n)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			hour := strconv.FormatInt(time.Hour.Microseconds(), 10)
			key := "offset-" + a.name
			if res := reserve(key, 10); !res.Allowed || !res.At.Equal(T) {
				t.Fatalf("reserve 10 at T: %+v, want allowed at %v", res, T)
			}
			clk.Step(-time.Hour)
			if res := reserve(key, 1); res.Allowed || res.Wait != a.wait {
				t.Fatalf("reserve 1 after a 1 h step back: %+v, want refused with wait %v", res, a.wait)
			}
			if got := offset(t, c, st, s, key); got != hour {
				t.Errorf("offset after the refusal that found the step: %q, want %s µs", got, hour)
			}
			for _, h := range st.Keys(s, key) {
				if ttl := c.PTTL(ctx, h).Val(); ttl <= 0 || ttl > time.Minute+defaultSlack {
					t.Errorf("TTL of %s after the step: %v, want (0, %v] on Redis's clock", h, ttl, time.Minute+defaultSlack)
				}
			}
			clk.Advance(a.wait / 2)
			if res := reserve(key, 1); res.Allowed || res.Wait != a.wait/2 {
				t.Fatalf("reserve 1 half the wait later: %+v, want refused with wait %v", res, a.wait/2)
			}
			if got := offset(t, c, st, s, key); got != hour {
				t.Errorf("offset after a second refusal: %q, want %s µs still (no drift)", got, hour)
			}
			clk.Advance(a.wait / 2)
			before := storetest.Used(t, st, s, key)
			res := reserve(key, 1)
			if !res.Allowed || !res.At.Equal(T.Add(a.wait)) {
				t.Fatalf("reserve 1 after the wait told: %+v, want allowed at T+%v (the key's timeline)", res, a.wait)
			}
			if err := st.Release(ctx, s, key, res.At, 1); err != nil {
				t.Fatal(err)
			}
			if after := storetest.Used(t, st, s, key); after[0] != before[0] || after[1] != before[1] || after[1] != 10 {
				t.Errorf("used after releasing the grant: %v, want %v as before it (rule B: 10)", after, before)
			}

			// A fresh key, at the clock as it now reads (a whole 10 s for the windows).
			key = "tolerance-" + a.name
			if res := reserve(key, 10); !res.Allowed {
				t.Fatalf("reserve 10 on %s: %+v", key, res)
			}
			for _, step := range []struct {
				by, wait time.Duration
				off      string
			}{
				{500 * time.Millisecond, a.wait + 500*time.Millisecond, ""},
				{500 * time.Millisecond, a.wait + engine.StepTolerance, ""},
				{time.Microsecond, a.wait, strconv.FormatInt((engine.StepTolerance + time.Microsecond).Microseconds(), 10)},
			} {
				clk.Step(-step.by)
				if res := reserve(key, 1); res.Allowed || res.Wait != step.wait {
					t.Errorf("reserve 1 after a further step back of %v: %+v, want refused with wait %v", step.by, res, step.wait)
				}
				if got := offset(t, c, st, s, key); got != step.off {
					t.Errorf("offset after a further step back of %v: %q, want %q", step.by, got, step.off)
				}
				if u := storetest.Used(t, st, s, key); u[0] != 10 || u[1] != 10 {
					t.Errorf("used after a further step back of %v: %v, want [10 10]", step.by, u)
				}
			}
		})
	}
}

// TestPauseKeepsToKeyTimeline: the pause a Sync set is on the key's timeline too. 1 reserved at T,
// a 30 s pause, the clock stepped back 1 h: a Peek says paused until T + 30 s with a wait of
// 30 s (before: 1 h 30 s, the pause read against the clock an hour behind it), the key's value
// carries the offset with the pause's instant and the key keeps its TTL on Redis's clock (the
// minute's window + slack, as the pause ends before it), and
// 30 s on the new clock later a Reserve is granted.
func TestPauseKeepsToKeyTimeline(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	T := t0.Add(10 * time.Second)
	clk := &storetest.SteppedClock{Base: clock.NewManual(T)}
	st := newStore(t, c, Options{Clock: clk})
	s, err := rollingwindow.New(strategy.Rule{Limit: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const key = "paused"
	if res, err := st.Reserve(ctx, s, key, 1); err != nil || !res.Allowed {
		t.Fatalf("reserve at T: %+v %v", res, err)
	}
	if err := st.Sync(ctx, s, key, engine.Update{Pause: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clk.Step(-time.Hour)
	snap, err := st.Peek(ctx, s, key, 1)
	if err != nil || !snap.PausedUntil.Equal(T.Add(30*time.Second)) || snap.Wait != 30*time.Second {
		t.Fatalf("peek after a 1 h step back: %+v %v, want paused until T+30s, wait 30s", snap, err)
	}
	pk := st.Keys(s, key)[0]
	if v, _ := readValue(t, c, st, s, key); v.pu != T.Add(30*time.Second).UnixMicro() || v.off != time.Hour.Microseconds() {
		t.Errorf("key after the step: pause until %d, offset %d; want %d and %d (the pause's instant, the key's offset)",
			v.pu, v.off, T.Add(30*time.Second).UnixMicro(), time.Hour.Microseconds())
	}
	if ttl := c.PTTL(ctx, pk).Val(); ttl <= 0 || ttl > time.Minute+defaultSlack {
		t.Errorf("TTL after the step: %v, want (0, %v]", ttl, time.Minute+defaultSlack)
	}
	clk.Advance(15 * time.Second)
	if res, err := st.Reserve(ctx, s, key, 1); err != nil || res.Allowed || res.Wait != 15*time.Second {
		t.Errorf("reserve 15 s later: %+v %v, want refused with wait 15s", res, err)
	}
	clk.Advance(15 * time.Second)
	if res, err := st.Reserve(ctx, s, key, 1); err != nil || !res.Allowed || !res.At.Equal(T.Add(30*time.Second)) {
		t.Errorf("reserve when the pause ends: %+v %v, want allowed at T+30s", res, err)
	}
}

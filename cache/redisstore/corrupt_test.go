package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestUnreadableKeyStartsAfreshReported: issue 14, defect 4. A key whose one Redis key holds what the script cannot
// use — a hash (WRONGTYPE), a foreign string, a value of another layout version, a value cut
// short by 3 bytes (inside the rolling window's buckets, of a short value and of a long one) or
// inside its header — is started afresh by every operation (record,
// reserve, admit, peek, release, and sync under the rolling window), never refused or locked
// out, and reported exactly once: one observe.StateLost event {Store "redis", Op "corrupt",
// the key, an error naming what was found}. After it the key counts exactly what the
// operation recorded (2 for record and reserve, 1 for admit, 5 for a sync raising usage to 5,
// 0 for peek and release) in both rules, and a second round of the same operation reports
// nothing more.
//
// Before the single-key layout, the scripts used redis.call, so a hash in a key failed every
// operation with WRONGTYPE, and nothing reported a loss of state.
func TestUnreadableKeyStartsAfreshReported(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	rules := []strategy.Rule{{Limit: 100, Window: time.Minute}, {Limit: 1000, Window: time.Hour, Granularity: time.Minute}}
	type corruption struct {
		name, want string
		apply      func(t *testing.T, rk string, valid []string)
	}
	set := func(t *testing.T, rk, v string) {
		t.Helper()
		if err := c.Set(ctx, rk, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	corruptions := []corruption{
		{"hash", "WRONGTYPE", func(t *testing.T, rk string, _ []string) {
			if err := c.HSet(ctx, rk, "t", "5", "hw", "1").Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage", "not the store's", func(t *testing.T, rk string, _ []string) { set(t, rk, "garbage\x00\xff") }},
		{"version", "unknown layout version", func(t *testing.T, rk string, valid []string) { set(t, rk, valid[0][:2]+"9"+valid[0][3:]) }},
		{"truncated", "unreadable", func(t *testing.T, rk string, valid []string) { set(t, rk, valid[0][:len(valid[0])-3]) }},
		{"truncated-long", "unreadable", func(t *testing.T, rk string, valid []string) { set(t, rk, valid[1][:len(valid[1])-3]) }},
		{"header", "unreadable", func(t *testing.T, rk string, valid []string) { set(t, rk, valid[0][:4]) }},
	}
	type op struct {
		name string
		do   func(st *Store, s *engine.Strategy, key string) error
		used int
	}
	ops := []op{
		{"record", func(st *Store, s *engine.Strategy, key string) error { return st.Record(ctx, s, key, 2) }, 2},
		{"reserve", func(st *Store, s *engine.Strategy, key string) error {
			res, err := st.Reserve(ctx, s, key, 2)
			if err == nil && !res.Allowed {
				t.Errorf("reserve 2 on a key started afresh: %+v, want allowed", res)
			}
			return err
		}, 2},
		{"admit", func(st *Store, s *engine.Strategy, key string) error {
			d, err := st.Admit(ctx, s, key, 1)
			if err == nil && !d.Allowed {
				t.Errorf("admit 1 on a key started afresh: %+v, want allowed", d)
			}
			return err
		}, 1},
		{"peek", func(st *Store, s *engine.Strategy, key string) error { _, err := st.Peek(ctx, s, key, 1); return err }, 0},
		{"release", func(st *Store, s *engine.Strategy, key string) error { return st.Release(ctx, s, key, t0, 3) }, 0},
		{"sync", func(st *Store, s *engine.Strategy, key string) error {
			return st.Sync(ctx, s, key, engine.Update{Reports: []engine.Report{{Rule: 0, Remaining: 5, Used: 5}, {Rule: 1, Remaining: 95, Used: 5}}})
		}, 5},
	}
	for _, a := range []struct {
		name string
		mk   func(...strategy.Rule) (*engine.Strategy, error)
	}{{"rollingwindow", rollingwindow.New}, {"fixedwindow", fixedwindow.New}, {"tokenbucket", tokenbucket.New}} {
		s, err := a.mk(rules...)
		if err != nil {
			t.Fatal(err)
		}
		rec := &observetest.Recorder{}
		clk := clock.NewManual(t0.Add(-time.Second))
		st := newStore(t, c, Options{Clock: clk, Observer: rec})
		// valid values of this strategy, to cut short or relabel: two seconds recorded, so
		// that the rolling window's value holds a bucket in an array (which "truncated"
		// cuts), and forty, a busy key's ("truncated-long")
		var valid []string
		for i, secs := range []int{2, 40} {
			key := "valid-" + strconv.Itoa(i)
			for range secs {
				if err := st.Record(ctx, s, key, 1); err != nil {
					t.Fatal(err)
				}
				clk.Advance(time.Second)
			}
			valid = append(valid, c.Get(ctx, st.Keys(s, key)[0]).Val())
		}
		if v, err := decodeValue(valid[1]); err != nil || a.name == "rollingwindow" && len(valid[1]) <= v.fixed+512 {
			t.Fatalf("the long value holds %d bytes (%v), want more than its header (%d) and 512 bytes of buckets", len(valid[1]), err, v.fixed)
		}
		for _, cr := range corruptions {
			for _, o := range ops {
				if o.name == "sync" && a.name != "rollingwindow" {
					continue
				}
				t.Run(a.name+"/"+cr.name+"/"+o.name, func(t *testing.T) {
					key := a.name + "-" + cr.name + "-" + o.name
					rk := st.Keys(s, key)[0]
					cr.apply(t, rk, valid)
					before := len(rec.Events())
					if err := o.do(st, s, key); err != nil {
						t.Fatalf("%s on a key holding %s: %v", o.name, cr.name, err)
					}
					evs := rec.Events()[before:]
					if len(evs) != 1 {
						t.Fatalf("%d events after %s on a key holding %s, want 1: %+v", len(evs), o.name, cr.name, evs)
					}
					e := evs[0]
					if e.Kind != observe.StateLost || e.Store != "redis" || e.Op != "corrupt" || e.Key != key || e.Err == nil || !strings.Contains(e.Err.Error(), cr.want) {
						t.Errorf("event %+v, want StateLost, redis, corrupt, key %q, an error naming %q", e, key, cr.want)
					}
					if u := usedOf(t, st, s, key); u[0] != o.used || u[1] != o.used {
						t.Errorf("used after %s on a key holding %s: %v, want %d in both rules", o.name, cr.name, u, o.used)
					}
					if err := o.do(st, s, key); err != nil {
						t.Fatal(err)
					}
					if evs := rec.Events()[before+1:]; len(evs) != 0 {
						t.Errorf("events after the key was started afresh: %+v, want none", evs)
					}
				})
			}
		}
	}
}

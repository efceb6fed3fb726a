package redisstore

import (
	"context"
	"encoding/binary"
	"math"
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

// TestCorruptNumbersStartAfreshReported: issue 14 (a reviewer's finding). A value with the store's own prefix and
// the right length whose doubles are not figures a script could have written — NaN, ±inf, a
// negative or fractional count, an instant far ahead of the key's, a window index past the
// slot's time, a token-bucket debt past its cap — is unreadable: the key is started afresh and
// reported exactly once (one observe.StateLost event), then limited exactly as a fresh key at
// 5 a minute: over the 40 reserves of the next two minutes (3 s apart) it grants lo..hi, and
// its PTTL is at most 2 minutes.
//
// Before the fix the scripts checked the prefix and the length only: a NaN total (rolling
// window), count (fixed window) or debt (token bucket) granted without limit, as NaN compares
// false; a pause 1e17 µs ahead locked the key out for ~3000 years with a matching TTL; none of
// it was reported.
func TestCorruptNumbersStartAfreshReported(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	rule := strategy.Rule{Limit: 5, Window: time.Minute}
	d := func(x float64) string { return string(binary.LittleEndian.AppendUint64(nil, math.Float64bits(x))) }
	nan, inf, far := d(math.NaN()), d(math.Inf(1)), d(1e17)
	ahead := d(float64(t0.Add(strategy.MaxWindow + time.Hour).UnixMicro())) // more than MaxWindow ahead
	rw, fw, tb := rollingwindow.New, fixedwindow.New, tokenbucket.New
	for _, tc := range []struct {
		name string
		mk   func(...strategy.Rule) (*engine.Strategy, error)
		at   int // byte offset after the prefix of the double to overwrite (with bucket: after the header)
		val  string
		lo   int // grants a sound key would give in these 2 minutes
		hi   int
		// bucket: at is into the rolling window's bucket array, made by a second reserve 2 s
		// after the first
		bucket bool
	}{
		// the reviewer's four
		{"rollingwindow-nan-total", rw, 8 * 4, nan, 8, 10, false},
		{"rollingwindow-far-pause", rw, 8 * 2, far, 8, 10, false},
		{"fixedwindow-nan-count", fw, 8 * 5, nan, 8, 11, false},
		{"tokenbucket-nan-debt", tb, 8 * 4, nan, 8, 14, false},
		// header: off, x, pu (rolling window), then per slot hw, total, nb, rr, ra, hl, hc, lo
		{"rollingwindow-negative-offset", rw, 8 * 0, d(-1), 8, 10, false},
		{"rollingwindow-inf-offset", rw, 8 * 0, inf, 8, 10, false},
		{"rollingwindow-far-expiry", rw, 8 * 1, ahead, 8, 10, false},
		{"rollingwindow-negative-pause", rw, 8 * 2, d(-5), 8, 10, false},
		{"rollingwindow-far-hw", rw, 8 * 3, ahead, 8, 10, false},
		{"rollingwindow-negative-total", rw, 8 * 4, d(-100), 8, 10, false},
		{"rollingwindow-fractional-total", rw, 8 * 4, d(0.5), 8, 10, false},
		{"rollingwindow-fractional-nb", rw, 8 * 5, d(0.5), 8, 10, false},
		{"rollingwindow-nan-remaining", rw, 8 * 6, nan, 8, 10, false},
		{"rollingwindow-far-reported-at", rw, 8 * 7, far, 8, 10, false},
		{"rollingwindow-minus-inf-newest", rw, 8 * 8, d(math.Inf(-1)), 8, 10, false},
		{"rollingwindow-negative-newest-count", rw, 8 * 9, d(-3), 8, 10, false},
		{"rollingwindow-far-oldest", rw, 8 * 10, ahead, 8, 10, false},
		// the bucket array, read when the whole value is
		{"rollingwindow-far-bucket", rw, 0, ahead, 8, 10, true},
		{"rollingwindow-nan-bucket-count", rw, 8, nan, 8, 10, true},
		{"rollingwindow-bucket-count-not-total", rw, 8, d(3), 8, 10, true},
		// fixed window: off, x, pu, then hw, k, c
		{"fixedwindow-negative-offset", fw, 8 * 0, d(-1e6), 8, 11, false},
		{"fixedwindow-nan-expiry", fw, 8 * 1, nan, 8, 11, false},
		{"fixedwindow-far-pause", fw, 8 * 2, far, 8, 11, false},
		{"fixedwindow-far-hw", fw, 8 * 3, ahead, 8, 11, false},
		{"fixedwindow-far-window", fw, 8 * 4, d(1e12), 8, 11, false},
		{"fixedwindow-fractional-window", fw, 8 * 4, d(0.5), 8, 11, false},
		{"fixedwindow-negative-count", fw, 8 * 5, d(-1000), 8, 11, false},
		{"fixedwindow-inf-count", fw, 8 * 5, inf, 8, 11, false},
		// token bucket: off, x, pu, then hw, q, r, s
		{"tokenbucket-far-hw", tb, 8 * 3, ahead, 8, 14, false},
		{"tokenbucket-debt-past-cap", tb, 8 * 4, d(1e15), 8, 14, false},
		{"tokenbucket-negative-debt", tb, 8 * 4, d(-1e6), 8, 14, false},
		{"tokenbucket-r-of-a-window", tb, 8 * 5, d(float64(time.Minute.Microseconds())), 8, 14, false},
		{"tokenbucket-inf-r", tb, 8 * 5, inf, 8, 14, false},
		{"tokenbucket-s-1000", tb, 8 * 6, d(1000), 8, 14, false},
		{"tokenbucket-nan-expiry", tb, 8 * 1, nan, 8, 14, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.mk(rule)
			if err != nil {
				t.Fatal(err)
			}
			rec := &observetest.Recorder{}
			clk := clock.NewManual(t0)
			st := newStore(t, c, Options{Clock: clk, Observer: rec})
			key := tc.name
			if _, err := st.Reserve(ctx, s, key, 1); err != nil {
				t.Fatal(err)
			}
			if tc.bucket {
				clk.Advance(2 * time.Second)
				if _, err := st.Reserve(ctx, s, key, 1); err != nil {
					t.Fatal(err)
				}
			}
			rk := st.Keys(s, key)[0]
			v := c.Get(ctx, rk).Val()
			dv, err := decodeValue(v)
			if err != nil {
				t.Fatal(err)
			}
			pos := dv.fixed - 8*(3+map[string]int{"rw": 8, "fw": 3, "tb": 4}[dv.magic])
			if tc.bucket {
				if dv.slots[s.CounterID(0)][2] != 1 {
					t.Fatalf("want 1 bucket in the array before corrupting it, value %+v", dv)
				}
				pos = dv.fixed
			}
			if err := c.SetRange(ctx, rk, int64(pos+tc.at), tc.val).Err(); err != nil {
				t.Fatal(err)
			}
			// the same calls on a key never written: the corrupt one must answer exactly so
			ref := key + "-fresh"
			granted := 0
			for i := 0; i < 40; i++ {
				clk.Advance(3 * time.Second) // 2 minutes in all: two whole windows
				res, err := st.Reserve(ctx, s, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				want, err := st.Reserve(ctx, s, ref, 1)
				if err != nil {
					t.Fatal(err)
				}
				if res != want {
					t.Fatalf("reserve %d: %+v, a fresh key %+v", i+1, res, want)
				}
				if res.Allowed {
					granted++
				}
			}
			ttl, refTTL := c.PTTL(ctx, rk).Val(), c.PTTL(ctx, st.Keys(s, ref)[0]).Val()
			lost := 0
			for _, e := range rec.Events() {
				if e.Kind == observe.StateLost {
					lost++
					if e.Key != key || e.Op != "corrupt" {
						t.Errorf("event %+v, want StateLost corrupt of %q", e, key)
					}
				}
			}
			// TTLs run on Redis's clock: the two keys' were set within the same call pair
			if granted > tc.hi || granted < tc.lo || ttl > 2*time.Minute || (ttl-refTTL).Abs() > time.Second || lost != 1 {
				t.Errorf("%s: granted %d in two minutes at 5 a minute (want %d..%d), key PTTL %v (want ≤ 2m, within 1 s of a fresh key's %v), StateLost events %d (want 1: the value is unusable and should be started afresh)",
					tc.name, granted, tc.lo, tc.hi, ttl, refTTL, lost)
			}
		})
	}
}

// TestScriptsBoundInstantsByMaxWindow: the scripts bound a key's instants by strategy.MaxWindow, written into
// them as a constant (µs); it must be the Go one.
func TestScriptsBoundInstantsByMaxWindow(t *testing.T) {
	want := "MAXW = " + strconv.FormatInt(strategy.MaxWindow.Microseconds(), 10)
	for name, src := range map[string]string{"state.lua": stateSource, "rollingwindow.lua": rollingSource} {
		if !strings.Contains(src, want) {
			t.Errorf("%s: no %q: the bound on instants is not strategy.MaxWindow", name, want)
		}
	}
}

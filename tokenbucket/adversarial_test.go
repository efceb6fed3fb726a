package tokenbucket

import (
	"math"
	"math/big"
	"math/rand"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Rule promises Window = capacity/rate rounded UP to the nanosecond, "so the refill is never
// faster than asked". Check it against exact rational arithmetic.
func TestRuleRoundsUpExactly(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	bad := 0
	for i := 0; i < 200000 && bad < 5; i++ {
		capacity := 1 + rng.Intn(1000)
		// a rate near a "nice" value, nudged by a few ulps
		base := float64(1+rng.Intn(100)) / float64(1+rng.Intn(10))
		rate := base
		for k := rng.Intn(4); k > 0; k-- {
			rate = math.Nextafter(rate, 0)
		}
		r, err := Rule(capacity, rate)
		if err != nil {
			continue
		}
		exact := new(big.Rat).Quo(new(big.Rat).SetInt64(int64(capacity)*1e9), new(big.Rat).SetFloat64(rate))
		q := new(big.Int).Quo(exact.Num(), exact.Denom())
		if new(big.Rat).SetInt(q).Cmp(exact) != 0 {
			q.Add(q, big.NewInt(1))
		}
		if want := time.Duration(q.Int64()); r.Window < want {
			bad++
			t.Errorf("Rule(%d, %v): window %d ns, exact ceiling %d ns: refill faster than asked", capacity, rate, int64(r.Window), int64(want))
		}
	}
}

// MaxProduct boundary: capacity × window = 2^62 exactly. Drain, monitor far beyond, refill.
func TestMaxProductBoundary(t *testing.T) {
	w := time.Duration(1 << 32)
	capacity := 1 << 30
	r := strategy.Rule{Limit: capacity, Window: w, Granularity: w}
	s, err := New(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(strategy.Rule{Limit: capacity + 1, Window: w, Granularity: w}); err == nil {
		t.Error("capacity+1 accepted")
	}
	b := NewBucket(capacity, w)
	t0 := time.Unix(1_800_000_000, 0)
	cs := []engine.Counter{b}
	if res, _ := s.Reserve(cs, t0, capacity); !res.Allowed {
		t.Fatal("full bucket refused its capacity")
	}
	if d := b.WaitTime(t0, capacity, capacity); d != w {
		t.Errorf("wait for a full refill %v, want %v", d, w)
	}
	b.Add(t0, math.MaxInt32) // monitoring overshoot
	b.Add(t0, math.MaxInt32)
	if u := b.Used(t0); u < capacity {
		t.Errorf("used %d", u)
	}
	if e := b.Expiry(); e.Before(t0) {
		t.Errorf("expiry %v before now", e)
	}
	st := s.States(cs, t0)
	if st[0].Reset <= 0 || st[0].Remaining != 0 {
		t.Errorf("states %+v", st)
	}
}

// Refill is never early: after spending k tokens at t0, a burst of n fits at t0+WaitTime and
// not one nanosecond before.
func TestRefillNeverEarly(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 20000; i++ {
		capacity := 1 + rng.Intn(50)
		w := time.Duration(1 + rng.Int63n(int64(time.Hour)))
		headroom := rng.Intn(capacity)
		lim := capacity - headroom
		b := NewBucket(capacity, w)
		t0 := time.Unix(0, rng.Int63n(1<<62)-1<<61)
		b.Add(t0, 1+rng.Intn(3*capacity))
		b.Add(t0.Add(time.Duration(rng.Int63n(int64(w)))), 1+rng.Intn(capacity))
		now := b.Latest()
		n := 1 + rng.Intn(lim)
		d := b.WaitTime(now, n, lim)
		if d == 0 {
			continue
		}
		// the exact number of tokens at now+d-1 must be short
		debt, last := b.State()
		e := now.Add(d - 1).Sub(last)
		missing := new(big.Rat).SetFrac(big.NewInt(debt), big.NewInt(int64(w)))
		missing.Sub(missing, new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(int64(e)), big.NewInt(int64(capacity))), big.NewInt(int64(w))))
		tokens := new(big.Rat).Sub(new(big.Rat).SetInt64(int64(capacity)), missing)
		need := new(big.Rat).SetInt64(int64(n + headroom))
		if tokens.Cmp(need) >= 0 {
			t.Fatalf("cap %d w %v headroom %d: burst %d fits at now+%v-1ns already (tokens %s)", capacity, w, headroom, n, d, tokens.FloatString(6))
		}
		c := NewBucket(capacity, w)
		c.SetState(debt, last)
		if c.WaitTime(now.Add(d), n, lim) != 0 {
			t.Fatalf("not fitting at now+d")
		}
	}
}

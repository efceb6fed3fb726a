package bucket

import (
	"math"
	"math/big"
	"math/rand"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
)

func sec(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

// TestRemoveRefundsTokensAndStateRestores: a new bucket has no expiry; Remove gives tokens back
// (never more than spent), and State/SetState restore a bucket exactly.
func TestRemoveRefundsTokensAndStateRestores(t *testing.T) {
	b := NewBucket(10, 10*time.Second)
	if !b.Expiry().IsZero() || !b.Latest().IsZero() {
		t.Error("a new bucket has an expiry or a latest instant")
	}
	b.Add(sec(100), 4)
	if e := b.Expiry(); !e.Equal(sec(104)) {
		t.Errorf("expiry = %v, want 104 s", e)
	}
	b.Remove(sec(100), 3)
	if got := b.Used(sec(100)); got != 1 {
		t.Errorf("used after giving back 3 = %d, want 1", got)
	}
	b.Remove(sec(100), 50)
	if got, e := b.Used(sec(100)), b.Expiry(); got != 0 || !e.IsZero() {
		t.Errorf("giving back more than spent: used %d, expiry %v; want a full bucket", got, e)
	}
	c := NewBucket(10, 10*time.Second)
	b.Add(sec(101), 6)
	debt, last := b.State()
	c.SetState(debt, last)
	if c.Used(sec(102)) != 5 || c.WaitTime(sec(102), 6, 10) != time.Second || c.Tokens() != 5 {
		t.Errorf("restored bucket: used %d tokens %v", c.Used(sec(102)), c.Tokens())
	}
}

// TestOverRecordingCapsExpiryAtMaxWindow: recording far more than the bucket holds keeps the expiry
// within strategy.MaxWindow instead of overflowing.
func TestOverRecordingCapsExpiryAtMaxWindow(t *testing.T) {
	b := NewBucket(1, time.Hour)
	for range 4 {
		b.Add(sec(0), math.MaxInt32)
	}
	if e := b.Expiry(); !e.Equal(sec(0).Add(strategy.MaxWindow)) {
		t.Errorf("expiry = %v, want MaxWindow after 0", e)
	}
	if got := b.Used(sec(0)); got != 87600 {
		t.Errorf("used = %d, want 87600 (what refills in ten years at one an hour)", got)
	}
}

// TestRefillNeverEarly: after spending k tokens at t0, a burst of n fits at t0+WaitTime and not
// one nanosecond before (exact rational arithmetic over random buckets).
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

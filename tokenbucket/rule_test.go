package tokenbucket

import (
	"math"
	"math/big"
	"math/rand"
	"testing"
	"time"
)

// TestRuleRoundsUpExactly: Rule promises Window = capacity/rate rounded UP to the nanosecond,
// "so the refill is never faster than asked"; checked against exact rational arithmetic for
// rates a few ulps off round values.
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

// TestFractionalRateNeverRefillsEarly: 5 tokens at 3 per second. The window is 5/3 s rounded up to
// the nanosecond, and a token takes a fifth of it, rounded up: never early.
func TestFractionalRateNeverRefillsEarly(t *testing.T) {
	r, err := Rule(5, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.Window != 1666666667 || r.Limit != 5 {
		t.Fatalf("Rule(5, 3) = %+v, want window 1666666667ns", r)
	}
	s, _ := New(r)
	cs := s.NewCounters()
	for i := range 5 {
		if res, _ := s.Reserve(cs, nil, sec(10), 1); !res.Allowed {
			t.Fatalf("token %d refused", i+1)
		}
	}
	res, _ := s.Reserve(cs, nil, sec(10), 1)
	if res.Allowed || res.Wait != 333333334 {
		t.Fatalf("sixth: %+v, want a wait of 333333334ns", res)
	}
	at := sec(10).Add(res.Wait)
	if res, _ := s.Reserve(cs, nil, at.Add(-1), 1); res.Allowed || res.Wait != 1 {
		t.Errorf("1 ns early: %+v, want a wait of 1ns", res)
	}
	if res, _ := s.Reserve(cs, nil, at, 1); !res.Allowed {
		t.Errorf("at the wait's end: %+v, want allowed", res)
	}
}

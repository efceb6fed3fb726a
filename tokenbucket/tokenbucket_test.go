package tokenbucket

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/bucket"
	"github.com/ratemonitor/ratemonitor/strategy/engine"

	"github.com/ratemonitor/ratemonitor/strategy"
)

func sec(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

// ten is a bucket of 10 tokens refilled at 1 per second.
var ten = strategy.Rule{Limit: 10, Window: 10 * time.Second}

// TestAnswersMatchWorkedValues: used and wait of a bucket of 10 tokens refilled at 1 a second,
// after each history, at each instant asked.
func TestAnswersMatchWorkedValues(t *testing.T) {
	type q struct {
		at   float64
		n    int
		used int
		wait time.Duration
	}
	cases := []struct {
		name    string
		history [][2]float64 // instant, tokens spent
		queries []q
	}{
		{"full bucket", nil, []q{{100, 1, 0, 0}, {100, 10, 0, 0}}},
		{"emptied at once", [][2]float64{{100, 10}}, []q{
			{100, 1, 10, time.Second},
			{100, 10, 10, 10 * time.Second},
			{100.5, 1, 10, 500 * time.Millisecond}, // 0.5 token: none to spend yet
			{103, 1, 7, 0},
			{103, 4, 7, time.Second},
			{110, 10, 0, 0},
		}},
		{"refill stops at the capacity", [][2]float64{{100, 10}, {1000, 10}}, []q{
			{1000, 1, 10, time.Second}, // the 890 s between did not store 890 tokens
		}},
		{"spent as it refills", [][2]float64{{100, 5}, {102, 5}}, []q{
			{102, 3, 8, time.Second},
			{104, 10, 6, 6 * time.Second},
		}},
		{"late write spends but does not refill", [][2]float64{{100, 10}, {95, 1}}, []q{
			{100, 1, 11, 2 * time.Second}, // 11 missing: the write at 95 is applied at 100
			{99, 1, 11, 3 * time.Second},  // asked in the past: answered at 100, the wait measured from 99
			{111, 10, 0, 0},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(ten)
			if err != nil {
				t.Fatal(err)
			}
			cs := s.NewCounters()
			for _, h := range c.history {
				s.Record(cs, sec(h[0]), int(h[1]))
			}
			for _, q := range c.queries {
				snap, err := s.Peek(cs, nil, sec(q.at), q.n)
				if err != nil {
					t.Fatal(err)
				}
				if snap.Usage[0].Used != q.used || snap.Wait != q.wait {
					t.Errorf("at %v: used %d, wait(%d) %v; want %d, %v", q.at, snap.Usage[0].Used, q.n, snap.Wait, q.used, q.wait)
				}
			}
		})
	}
}

// TestAdmitRefusalSpendsNothing: a refused attempt spends nothing, and each rule reports its
// remaining tokens and the time until the bucket is full.
func TestAdmitRefusalSpendsNothing(t *testing.T) {
	s, _ := New(strategy.Rule{Limit: 2, Window: 2 * time.Second}, strategy.Rule{Limit: 10, Window: 100 * time.Second})
	cs := s.NewCounters()
	want := []struct {
		at      float64
		allowed bool
		retry   time.Duration
		rem     [2]int
		reset   [2]time.Duration
	}{
		{50, true, 0, [2]int{1, 9}, [2]time.Duration{time.Second, 10 * time.Second}},
		{50, true, 0, [2]int{0, 8}, [2]time.Duration{2 * time.Second, 20 * time.Second}},
		{50, false, time.Second, [2]int{0, 8}, [2]time.Duration{2 * time.Second, 20 * time.Second}},
		{50.25, false, 750 * time.Millisecond, [2]int{0, 8}, [2]time.Duration{1750 * time.Millisecond, 19750 * time.Millisecond}},
		{51, true, 0, [2]int{0, 7}, [2]time.Duration{2 * time.Second, 29 * time.Second}},
	}
	for i, w := range want {
		d, err := s.Admit(cs, sec(w.at), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != w.allowed || d.RetryAfter != w.retry ||
			d.Rules[0].Remaining != w.rem[0] || d.Rules[1].Remaining != w.rem[1] ||
			d.Rules[0].Reset != w.reset[0] || d.Rules[1].Reset != w.reset[1] {
			t.Errorf("attempt %d at %v: %+v; want %+v", i+1, w.at, d, w)
		}
	}
}

// TestHeadroomHoldsTokensBack: with a headroom of 2, 8 of 10 tokens are granted and the ninth
// waits for a refill.
func TestHeadroomHoldsTokensBack(t *testing.T) {
	s, _ := New(strategy.Rule{Limit: 10, Window: 10 * time.Second, Headroom: 2})
	cs := s.NewCounters()
	for i := range 8 {
		if res, _ := s.Reserve(cs, nil, sec(0), 1); !res.Allowed {
			t.Fatalf("token %d refused", i+1)
		}
	}
	if res, _ := s.Reserve(cs, nil, sec(0), 1); res.Allowed || res.Wait != time.Second {
		t.Errorf("ninth: %+v, want a wait of 1s (2 tokens held back)", res)
	}
}

// TestInvalidRulesAndBurstsRefused: Rule and New refuse what no bucket can be, and a burst over
// the capacity is ErrBurstTooLarge.
func TestInvalidRulesAndBurstsRefused(t *testing.T) {
	for _, c := range []struct {
		capacity int
		rate     float64
	}{{0, 1}, {1, 0}, {1, -1}, {1, math.NaN()}, {1, math.Inf(1)}, {1, 1e-12}} {
		if _, err := Rule(c.capacity, c.rate); !errors.Is(err, strategy.ErrInvalidRule) {
			t.Errorf("Rule(%d, %v): %v, want ErrInvalidRule", c.capacity, c.rate, err)
		}
	}
	if _, err := New(strategy.Rule{Limit: 1 << 30, Window: 24 * time.Hour}); !errors.Is(err, strategy.ErrInvalidRule) {
		t.Errorf("limit × window past 2^62: %v", err)
	}
	s, _ := New(ten)
	if _, err := s.Admit(s.NewCounters(), sec(0), 11); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 11: %v", err)
	}
}

// TestWindowNeedNotBeWholeSeconds: the token bucket ignores granularity, so windows need not be
// whole seconds.
func TestWindowNeedNotBeWholeSeconds(t *testing.T) {
	s, err := New(strategy.Rule{Limit: 3, Window: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.NewCounters()
	s.Record(cs, sec(0), 3)
	if snap, _ := s.Peek(cs, nil, sec(0), 1); snap.Wait != 500*time.Millisecond {
		t.Errorf("wait = %v, want 500ms (3 tokens per 1.5 s)", snap.Wait)
	}
	if r, err := Rule(5, 3); err != nil || r.Granularity != 0 {
		t.Errorf("Rule(5, 3) = %+v, %v; want no granularity", r, err)
	}
}

// TestMaxProductCapacityDrainsAndRefills: at the boundary, capacity × window = 2^62 exactly (one
// more token is refused), a full bucket drains, monitors far beyond its capacity and refills.
func TestMaxProductCapacityDrainsAndRefills(t *testing.T) {
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
	b := bucket.NewBucket(capacity, w)
	t0 := time.Unix(1_800_000_000, 0)
	cs := []engine.Counter{b}
	if res, _ := s.Reserve(cs, nil, t0, capacity); !res.Allowed {
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

package strategy

import (
	"testing"
	"time"
)

// TestGCRARemoveRefundsOnlyUnpaidCharge: Remove gives back min(n·T, at + n·T − latest), not
// the whole n·T: a charge paid off by the time of the cancel refunds nothing, one half paid
// off refunds half, one made at the latest instant refunds it all.
func TestGCRARemoveRefundsOnlyUnpaidCharge(t *testing.T) {
	const T = time.Second
	t0 := time.Unix(1_000_000, 0)
	cases := []struct {
		name    string
		chargeN int
		later   time.Duration // from the charge to the burst that follows it
		burst   int           // charged at t0+later
		want    time.Duration // TAT − (t0+later) after Remove(t0, chargeN)
	}{
		{"paid off, then a full burst", 1, 10 * T, 30, 30 * T},
		{"half paid off", 2, T, 0, 0},
		{"not paid off at all", 2, 0, 0, 0},
		{"2 at t0, 1 more at t0+T", 2, T, 1, T},
	}
	for _, c := range cases {
		g := NewGCRA(T, 30)
		g.Add(t0, c.chargeN)
		now := t0.Add(c.later)
		if c.burst > 0 {
			g.Add(now, c.burst)
		} else {
			g.Used(now) // the GCRA sees now
		}
		g.Remove(t0, c.chargeN)
		if got := g.Expiry().Sub(now); got != c.want {
			t.Errorf("%s: TAT − now after the cancel = %v, want %v", c.name, got, c.want)
		}
	}
}

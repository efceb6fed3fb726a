package bucket

import (
	"testing"
	"time"
)

// TestShiftKeepsTokensAndMovesRefill: the tokens are kept and the refill runs from the shifted
// instant.
func TestShiftKeepsTokensAndMovesRefill(t *testing.T) {
	b := NewBucket(10, 10*time.Second)
	b.Add(time.Unix(100, 0), 10)
	b.Shift(-50 * time.Second)
	if got := b.Latest(); !got.Equal(time.Unix(50, 0)) {
		t.Fatalf("latest = %v, want 50 s", got.Unix())
	}
	if got := b.Used(time.Unix(50, 0)); got != 10 {
		t.Errorf("used = %d, want 10", got)
	}
	if got := b.WaitTime(time.Unix(50, 0), 1, 10); got != time.Second {
		t.Errorf("wait(1) = %v, want 1s", got)
	}
	if got := b.Expiry(); !got.Equal(time.Unix(60, 0)) {
		t.Errorf("expiry = %v, want 60 s", got.Unix())
	}
	e := NewBucket(10, 10*time.Second)
	e.Shift(-time.Hour)
	if !e.Latest().IsZero() {
		t.Errorf("unused bucket after a shift: latest %v, want zero", e.Latest())
	}
}
